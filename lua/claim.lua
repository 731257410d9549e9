-- claim: record on the home shard that a buyer holds a (borrowed) unit, unless they hold another.
--
-- KEYS[1] {item:<id>:<home>}:buyers  (values as in reserve.lua: orderId, or a pending borrow)
-- ARGV[1] userId   ARGV[2] orderId
--
-- Returns {code, value}:
--   {0, orderId}          CLAIMED: the pending borrow of this orderId (or no entry) became the
--                         buyer's dedup entry
--   {1, orderId}          REPLAY: already claimed by this orderId
--   {2, existingOrderId}  ALREADY: the buyer holds another order; the caller releases the unit
--   {3, pendingOrderId}   SUPERSEDED: another borrow of the buyer replaced this one (its lease
--                         ran out); the caller releases the unit
--
-- Invariant: the buyer keeps one dedup entry; it only ever names an orderId that holds a unit or
-- is a pending borrow that may still take one.
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  if existing == ARGV[2] then
    return {1, existing}
  end
  local pending = string.match(existing, '^~%d+~(.+)$')
  if pending == ARGV[2] then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    return {0, ARGV[2]}
  end
  if pending then
    return {3, pending}
  end
  return {2, existing}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {0, ARGV[2]}
