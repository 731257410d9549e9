-- load: (re)build one place from the database, atomically (warm-up / arm). One script for both
-- kinds of place: an item's stock shard {item:<id>:<k>} and a flash voucher {voucher:<code>} are
-- each a counter and hashes of pairs, all under one hash tag.
--
-- KEYS[1]         the counter: {item:<id>:<k>}:stock, or {voucher:<code>}:remaining
-- KEYS[2..#KEYS]  the hashes to fill: an item shard's orders and buyers; a voucher's holds and
--                 customers (both rebuilt), then its ended (which only grows)
-- ARGV[1] units (or uses) left
-- ARGV[2] r = how many hashes, from KEYS[2] on, are emptied before they are filled
-- then, for each hash in KEYS order: n = its number of pairs, then n pairs (field, value)
--
-- Returns the units left written.
--
-- Invariant: the counter and the rebuilt hashes change together, in one call, so no reserve ever
-- sees a half-loaded place. The outbox is never named: the caller refuses to load while it is not
-- empty (an event in flight would otherwise be forgotten), so it stays as it is. A hash past the
-- first r keeps what it had (a released voucher orderId stays released).
local rebuilt = tonumber(ARGV[2])
redis.call('DEL', KEYS[1], unpack(KEYS, 2, rebuilt + 1))
redis.call('SET', KEYS[1], ARGV[1])
local i = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[i])
  for _ = 1, n do
    redis.call('HSET', KEYS[k], ARGV[i + 1], ARGV[i + 2])
    i = i + 2
  end
  i = i + 1
end
return tonumber(ARGV[1])
