-- release: give an order's unit back to the shard it came from, at most once.
--
-- KEYS[1] {item:<id>:<j>}:stock   KEYS[2] {item:<id>:<j>}:orders   KEYS[3] {item:<id>:<j>}:outbox
-- ARGV[1] orderId
--
-- Returns 1 when the unit went back, 0 when there was no hold (already released, never taken) or
-- the shard is not loaded (its stock key is missing: INCR would create a shard of one unit that
-- answers "empty" afterwards; the next load rebuilds it from the database instead).
--
-- Invariant: the stock grows only when this call removed the hold record, so calling it twice,
-- or from two expiry jobs at once, gives back one unit.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('INCR', KEYS[1])
return 1
