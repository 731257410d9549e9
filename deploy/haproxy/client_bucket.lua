-- The per-client-address token bucket of a gateway (gateway/ratelimit.py, FLASHSALE_IP_RATE_PER_S
-- and FLASHSALE_IP_BURST), kept once at the balancer: each gateway keeps its own too, so
-- behind N gateways a client would otherwise get N buckets.
--
-- `lua-load` puts this in haproxy's one shared Lua state, whose code runs under a global lock:
-- a take is atomic across haproxy's threads, so the bucket is exact, not approximately so.
-- `http-request lua.client_bucket <rate> <burst>` sets txn.retry_after (seconds, as the
-- gateway computes it) when the client has no token; the configuration answers the 429.

local buckets = {}  -- client address -> { tokens, last (s) }
local count = 0
local MAX_KEYS = 1000000

local function seconds()
  local now = core.now()
  return now.sec + now.usec / 1e6
end

-- Forget buckets that have refilled: they behave exactly like new ones.
local function sweep(now, rate, burst)
  local full_after = burst / rate
  for key, bucket in pairs(buckets) do
    if now - bucket[2] >= full_after then
      buckets[key] = nil
      count = count - 1
    end
  end
end

core.register_action("client_bucket", { "http-req" }, function(txn, rate_text, burst_text)
  local rate, burst = tonumber(rate_text), tonumber(burst_text)
  local key = txn.f:src()
  local now = seconds()
  local bucket = buckets[key]
  local tokens = burst
  if bucket == nil then
    if count >= MAX_KEYS then sweep(now, rate, burst) end
    count = count + 1
  else
    tokens = math.min(burst, bucket[1] + (now - bucket[2]) * rate)
  end
  if tokens < 1.0 then
    buckets[key] = { tokens, now }
    txn:set_var("txn.retry_after", math.max(1, math.ceil((1.0 - tokens) / rate)))
    return
  end
  buckets[key] = { tokens - 1.0, now }
end, 2)
