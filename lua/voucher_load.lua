-- voucher_load: (re)build a flash voucher's keys from the database, atomically (warm-up / arm).
--
-- KEYS[1] remaining   KEYS[2] customers   KEYS[3] holds   KEYS[4] outbox   KEYS[5] ended
-- ARGV[1] uses left
-- ARGV[2] n = number of hold records, then n pairs (orderId, customerId)   -> holds, customers
-- then m = number of ended reservations, then m pairs (orderId, customerId) -> ended
--
-- Returns the uses left written. The customers' counts are rebuilt from the hold records. The
-- caller refuses to load while the outbox is not empty (a use in flight would be forgotten), so
-- the outbox is left as it is; ended only grows (a released orderId stays released).
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SET', KEYS[1], ARGV[1])
local i = 2
local n = tonumber(ARGV[i])
for _ = 1, n do
  redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i + 2])
  redis.call('HINCRBY', KEYS[2], ARGV[i + 2], 1)
  i = i + 2
end
i = i + 1
local m = tonumber(ARGV[i])
for _ = 1, m do
  redis.call('HSET', KEYS[5], ARGV[i + 1], ARGV[i + 2])
  i = i + 2
end
return tonumber(ARGV[1])
