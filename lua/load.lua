-- load: (re)build one place from the database, merged with what Redis has, atomically (warm-up /
-- arm). One script for both kinds of place: an item's stock shard {item:<id>:<k>} and a flash
-- voucher {voucher:<code>} are each a counter and hashes of pairs, all under one hash tag.
--
-- KEYS[1]  the counter: {item:<id>:<k>}:stock, or {voucher:<code>}:remaining
-- KEYS[2]  the hold records, orderId -> owner: {item:<id>:<k>}:orders, or {voucher:<code>}:holds
-- KEYS[3]  the owners: an item shard's {…}:buyers (userId -> orderId, the buyers' dedup entries),
--          or a voucher's {…}:customers (customerId -> uses held: recounted from the holds)
-- KEYS[4..] hashes that only grow: a voucher's {…}:ended
-- ARGV[1]  units: what the counter plus the holds must come to, less the holds given in ARGV
-- ARGV[2]  r = 2, the number of hashes from KEYS[2] on that are merged (the rest only grow)
-- then, for each hash in KEYS order: n = its number of pairs, then n pairs (field, value)
--
-- Returns the units left written.
--
-- Invariant: no hold record and no buyer entry Redis has is ever dropped or changed: a load
-- racing buyers (or a release) keeps every reservation made in between. The given holds are
-- added where missing, and the counter is set so that counter + HLEN(holds) = ARGV[1] + the
-- given holds, whatever ran since the caller looked: a hold taken meanwhile is counted by its
-- own presence. The counter and the hashes change together, in one call, so no reserve ever sees
-- a half-loaded place. The outbox is never named: an event on its way to Kafka stays as it is.
local customers = string.sub(KEYS[3], -#':customers') == ':customers'
local merged = tonumber(ARGV[2]) + 1
local given = tonumber(ARGV[3])
local i = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[i])
  for _ = 1, n do
    if k > merged then
      redis.call('HSET', KEYS[k], ARGV[i + 1], ARGV[i + 2])
    elseif not (k == 3 and customers) then
      redis.call('HSETNX', KEYS[k], ARGV[i + 1], ARGV[i + 2])
    end
    i = i + 2
  end
  i = i + 1
end
if customers then
  -- Each customer's count is the number of their holds (voucher_reserve.lua's limit check).
  redis.call('DEL', KEYS[3])
  local holds = redis.call('HGETALL', KEYS[2])
  for j = 2, #holds, 2 do
    redis.call('HINCRBY', KEYS[3], holds[j], 1)
  end
end
local left = tonumber(ARGV[1]) + given - redis.call('HLEN', KEYS[2])
if left < 0 then
  left = 0 -- more holds than units: an oversold place, left for reconciliation to report
end
redis.call('SET', KEYS[1], left)
return left
