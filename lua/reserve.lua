-- reserve: a buyer takes one unit from their home shard, once.
--
-- KEYS[1] {item:<id>:<k>}:stock   units left on this shard (integer; missing = not loaded)
-- KEYS[2] {item:<id>:<k>}:buyers  hash userId -> orderId (the per-user dedup lives on the home
--                                 shard), or "~<sinceMs>~<orderId>" while that order's borrow
--                                 from another shard is unfinished (a pending borrow)
-- KEYS[3] {item:<id>:<k>}:orders  hash orderId -> userId (hold records of units taken from here)
-- KEYS[4] {item:<id>:<k>}:outbox  hash orderId -> order event (until Kafka acknowledged it)
-- ARGV[1] userId   ARGV[2] orderId   ARGV[3] order event payload (bytes)
-- ARGV[4] optional, the item has other shards: when this one is empty, write the buyer's pending
--         borrow before the caller borrows elsewhere (any value; the router passes its lease)
-- ARGV[5] optional, orderId of a stale pending borrow of this buyer that held no unit anywhere
--         (the caller checked): this call replaces it
--
-- Returns {code, value[, ms]}:
--   {0, unitsLeft}               RESERVED: a unit was taken, hold + outbox + dedup written
--   {1, orderId}                 REPLAY: this orderId already holds the buyer's unit
--   {2, existingOrderId}         ALREADY: the buyer holds another active order for this item
--   {3, "", nowMs}               EMPTY: no unit here; with ARGV[4], the pending borrow of this
--                                orderId is written, dated nowMs (Redis clock), for borrow.lua
--   {4, pendingOrderId, ageMs}   BORROWING: another borrow of this buyer is unfinished
--   {5, ""}                      NOT_LOADED: the stock key is missing (never loaded, or this
--                                node lost it): never an empty shard, the caller answers 503
--
-- Invariant: stock + HLEN(orders) is unchanged by this script; a unit is taken only together
-- with its hold record, its outbox entry and the buyer's dedup entry. A buyer has one dedup entry
-- per item, plain or pending, so a retry with a new orderId never borrows a second unit.
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  if existing == ARGV[2] then
    return {1, existing}
  end
  local since, pending = string.match(existing, '^~(%d+)~(.+)$')
  if not pending then
    return {2, existing}
  end
  if pending ~= ARGV[5] then
    local t = redis.call('TIME')
    return {4, pending, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(since)}
  end
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {5, ''}
end
stock = tonumber(stock)
if stock <= 0 then
  if not ARGV[4] then
    return {3, ''}
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[2], ARGV[1], '~' .. now .. '~' .. ARGV[2])
  return {3, '', now}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[3])
return {0, tostring(stock - 1)}
