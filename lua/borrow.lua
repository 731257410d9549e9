-- borrow: take one unit from another shard of the item when the buyer's home shard is empty.
-- The buyer's dedup entry stays on the home shard (claim.lua writes it next).
--
-- KEYS[1] {item:<id>:<j>}:stock   KEYS[2] {item:<id>:<j>}:orders   KEYS[3] {item:<id>:<j>}:outbox
-- ARGV[1] userId   ARGV[2] orderId   ARGV[3] order event payload (bytes)
--
-- Returns {code, value}:
--   {0, unitsLeft}  BORROWED: a unit was taken from this shard, hold + outbox written
--   {1, ""}         REPLAY: this orderId already holds a unit here
--   {3, ""}         EMPTY: nothing to lend
--
-- Invariant: stock + HLEN(orders) is unchanged; the outbox entry is written with the hold, so a
-- crash before claim.lua still delivers the order (the database's unique index then refuses a
-- second active order for the buyer, and the writer releases this unit).
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return {1, ''}
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock <= 0 then
  return {3, ''}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {0, tostring(stock - 1)}
