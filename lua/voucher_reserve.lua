-- voucher_reserve: a customer takes one use of a flash voucher, once per orderId.
--
-- KEYS[1] {voucher:<code>}:remaining  uses left (integer; missing = the voucher is not armed)
-- KEYS[2] {voucher:<code>}:customers  hash customerId -> uses the customer holds
-- KEYS[3] {voucher:<code>}:holds      hash orderId -> customerId (one record per use taken)
-- KEYS[4] {voucher:<code>}:outbox     hash orderId -> VoucherReserved event (until Kafka acked it)
-- KEYS[5] {voucher:<code>}:ended      hash orderId -> customerId (reservations released for good)
-- ARGV[1] customerId   ARGV[2] orderId   ARGV[3] per-customer limit   ARGV[4] event payload
--
-- Returns {code, value}:
--   {0, usesLeft}   RESERVED: a use was taken, hold + customer count + outbox written
--   {1, ""}         REPLAY: this orderId already holds a use for this customer (a retry)
--   {2, count}      ALREADY_USED: the customer holds the per-customer limit of uses
--   {3, ""}         OUT_OF_STOCK: no use left
--   {4, ""}         CONFLICT: this orderId holds a use of another customer
--   {5, ""}         ENDED: this orderId's reservation was released or expired; never taken again
--   {6, ""}         NOT_LOADED: the voucher was never armed here (or Redis lost it): 503
--
-- Invariant: remaining + HLEN(holds) is unchanged by this script, and every customer's count is
-- the number of their hold records; a use is taken only together with its hold, its customer
-- count and its outbox entry.
local holder = redis.call('HGET', KEYS[3], ARGV[2])
if holder then
  if holder == ARGV[1] then
    return {1, ''}
  end
  return {4, ''}
end
if redis.call('HEXISTS', KEYS[5], ARGV[2]) == 1 then
  return {5, ''}
end
local left = redis.call('GET', KEYS[1])
if not left then
  return {6, ''}
end
local used = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if used >= tonumber(ARGV[3]) then
  return {2, tostring(used)}
end
left = tonumber(left)
if left <= 0 then
  return {3, ''}
end
redis.call('DECR', KEYS[1])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[4])
return {0, tostring(left - 1)}
