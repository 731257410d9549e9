-- unclaim: forget a buyer's dedup entry on the home shard once their order is over (so a buyer
-- whose order expired or was cancelled may buy again), or once their borrow found nothing.
--
-- KEYS[1] {item:<id>:<home>}:buyers  (values as in reserve.lua: orderId, or a pending borrow)
-- ARGV[1] userId   ARGV[2] orderId
--
-- Returns 1 when the entry named this orderId (claimed or pending) and was removed, 0 otherwise.
--
-- Invariant: a newer order of the same buyer, or another pending borrow, is never touched.
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing and (existing == ARGV[2] or string.match(existing, '^~%d+~(.+)$') == ARGV[2]) then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
