-- load_shard: (re)build one stock shard from the database, atomically (warm-up / arm).
--
-- KEYS[1] stock   KEYS[2] buyers   KEYS[3] orders   KEYS[4] outbox
-- ARGV[1] units left for this shard
-- ARGV[2] n = number of hold records, then n pairs (orderId, userId)   -> orders
-- then m = number of buyer entries, then m pairs (userId, orderId)     -> buyers
--
-- Returns the units left written. The caller refuses to load while an outbox is not empty (an
-- order in flight would otherwise be forgotten), so the outbox is left as it is.
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SET', KEYS[1], ARGV[1])
local i = 2
local n = tonumber(ARGV[i])
for _ = 1, n do
  redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i + 2])
  i = i + 2
end
i = i + 1
local m = tonumber(ARGV[i])
for _ = 1, m do
  redis.call('HSET', KEYS[2], ARGV[i + 1], ARGV[i + 2])
  i = i + 2
end
return tonumber(ARGV[1])
