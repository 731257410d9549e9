-- reserve: a buyer takes one unit from their home shard, once.
--
-- KEYS[1] {item:<id>:<k>}:stock   units left on this shard (integer)
-- KEYS[2] {item:<id>:<k>}:buyers  hash userId -> orderId (the per-user dedup lives on the home shard)
-- KEYS[3] {item:<id>:<k>}:orders  hash orderId -> userId (hold records of units taken from this shard)
-- KEYS[4] {item:<id>:<k>}:outbox  hash orderId -> order event (until Kafka acknowledged it)
-- ARGV[1] userId   ARGV[2] orderId   ARGV[3] order event payload (bytes)
--
-- Returns {code, value}:
--   {0, unitsLeft}        RESERVED: a unit was taken, hold + outbox written
--   {1, orderId}          REPLAY: this orderId already holds the buyer's unit (a retried call)
--   {2, existingOrderId}  ALREADY: the buyer holds another active order for this item
--   {3, ""}               EMPTY: no unit on this shard (the caller may borrow from another)
--
-- Invariant: stock + HLEN(orders) is unchanged by this script; a unit is taken only together
-- with its hold record, its outbox entry and the buyer's dedup entry.
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  if existing == ARGV[2] then
    return {1, existing}
  end
  return {2, existing}
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock <= 0 then
  return {3, ''}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
return {0, tostring(stock - 1)}
