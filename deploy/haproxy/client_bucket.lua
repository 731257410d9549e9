-- The per-client token buckets of a gateway (gateway/ratelimit.py), kept once at the balancer:
-- per client address (FLASHSALE_IP_RATE_PER_S, FLASHSALE_IP_BURST) and per buyer
-- (FLASHSALE_USER_RATE_PER_S, FLASHSALE_USER_BURST). Each gateway keeps its own too, so behind
-- N gateways a client would otherwise get N buckets of each.
--
-- `lua-load` puts this in haproxy's one shared Lua state, whose code runs under a global lock:
-- a take is atomic across haproxy's threads, so a bucket is exact, not approximately so.
-- `http-request lua.client_bucket <var> <rate> <burst>` takes a token from the bucket named by
-- the request's variable <var> (one set of buckets per variable; none taken when the variable
-- is unset), and sets txn.retry_after (seconds, as the gateway computes it) when it has none;
-- the configuration answers the 429. `http-response lua.client_bucket_refund <var> <rate>
-- <burst>` gives that token back: for an answer its gateway gave before taking one.

local tables = {}  -- variable -> { buckets = { key -> { tokens, last (s) } }, count }
local MAX_KEYS = 1000000

local function seconds()
  local now = core.now()
  return now.sec + now.usec / 1e6
end

-- Forget buckets that have refilled: they behave exactly like new ones.
local function sweep(tbl, now, rate, burst)
  local full_after = burst / rate
  for key, bucket in pairs(tbl.buckets) do
    if now - bucket[2] >= full_after then
      tbl.buckets[key] = nil
      tbl.count = tbl.count - 1
    end
  end
end

local function table_of(var)
  local tbl = tables[var]
  if tbl == nil then
    tbl = { buckets = {}, count = 0 }
    tables[var] = tbl
  end
  return tbl
end

core.register_action("client_bucket", { "http-req" }, function(txn, var, rate_text, burst_text)
  local key = txn:get_var(var)
  if key == nil then return end
  local rate, burst = tonumber(rate_text), tonumber(burst_text)
  local tbl = table_of(var)
  local now = seconds()
  local bucket = tbl.buckets[key]
  local tokens = burst
  if bucket == nil then
    if tbl.count >= MAX_KEYS then sweep(tbl, now, rate, burst) end
    tbl.count = tbl.count + 1
  else
    tokens = math.min(burst, bucket[1] + (now - bucket[2]) * rate)
  end
  if tokens < 1.0 then
    tbl.buckets[key] = { tokens, now }
    txn:set_var("txn.retry_after", math.max(1, math.ceil((1.0 - tokens) / rate)))
    return
  end
  tbl.buckets[key] = { tokens - 1.0, now }
end, 3)

core.register_action("client_bucket_refund", { "http-res" }, function(txn, var, rate_text, burst_text)
  local key = txn:get_var(var)
  if key == nil then return end
  local bucket = table_of(var).buckets[key]
  if bucket == nil then return end  -- swept: full already
  local rate, burst = tonumber(rate_text), tonumber(burst_text)
  local now = seconds()
  bucket[1] = math.min(burst, bucket[1] + (now - bucket[2]) * rate + 1.0)
  bucket[2] = now
end, 3)
