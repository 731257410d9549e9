-- voucher_release: give a flash voucher use back, at most once.
--
-- KEYS[1] remaining   KEYS[2] customers   KEYS[3] holds   KEYS[4] outbox   KEYS[5] ended
-- (all {voucher:<code>}:…, see voucher_reserve.lua)
-- ARGV[1] orderId
-- ARGV[2] "1": the reservation ended for good (released, expired, refused): remember the orderId
--         in ended so that a retry of it never takes a use again; "0": it never reached Kafka
--         (the caller answered 503), so the same orderId may try again
--
-- Returns 1 when the use went back, 0 when there was no hold (already released, never taken) or
-- the voucher is not loaded (remaining is missing: INCR would create a voucher of one use that
-- later answers "out of stock"; the next arm rebuilds it from the database instead). A voucher
-- that is not loaded is left untouched: nothing is written, not even ended.
--
-- Invariant: remaining grows, and the customer's count shrinks, only when this call removed the
-- hold record, so calling it twice, or from two expiry jobs at once, gives back one use.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local customer = redis.call('HGET', KEYS[3], ARGV[1])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[5], ARGV[1], customer or '')
end
if not customer then
  return 0
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('INCR', KEYS[1])
if redis.call('HINCRBY', KEYS[2], customer, -1) <= 0 then
  redis.call('HDEL', KEYS[2], customer)
end
return 1
