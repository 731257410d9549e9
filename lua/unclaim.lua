-- unclaim: forget a buyer's dedup entry on the home shard once their order is over, so a buyer
-- whose order expired or was cancelled may buy again.
--
-- KEYS[1] {item:<id>:<home>}:buyers
-- ARGV[1] userId   ARGV[2] orderId
--
-- Returns 1 when the entry pointed at this orderId and was removed, 0 otherwise (a newer order of
-- the same buyer is never touched).
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
