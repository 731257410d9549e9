-- claim: record on the home shard that a buyer holds a (borrowed) unit, unless they hold another.
--
-- KEYS[1] {item:<id>:<home>}:buyers
-- ARGV[1] userId   ARGV[2] orderId
--
-- Returns {code, value}:
--   {0, orderId}          CLAIMED
--   {1, orderId}          REPLAY: already claimed by this orderId
--   {2, existingOrderId}  ALREADY: the buyer holds another order; the caller releases the unit
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  if existing == ARGV[2] then
    return {1, existing}
  end
  return {2, existing}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {0, ARGV[2]}
