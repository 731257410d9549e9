-- wrk script: the full spike. Every buyer of a token file slice POSTs exactly once; a thread that
-- has sent its last token sends GET /healthz on its free connections (answered 200, which no
-- purchase ever is, so they are told apart), and stops once every buyer of its slice has an
-- answer, printing "SPIKE_DONE <thread>" so the caller can end wrk (SIGINT) without waiting out
-- -d. Answers are counted by status; times are CLOCK_MONOTONIC microseconds (Python's
-- time.monotonic() clock), so the caller can line them up with its database polls.
-- wrk calls thread 0's request() once before the run to check what it returns
-- (script_verify_request): that call gets a health check, so it costs no buyer.
-- Usage: wrk -t <n> -d <upper bound> -s spike.lua <url> -- <token file> <first line> <count> <n>
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } spike_timespec;
int clock_gettime(int clk_id, spike_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("spike_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

local threads = {}

function setup(thread)
  common.number(thread)
  table.insert(threads, thread)
end

local tokens = {}
local next_index = 1
local extra = nil
local finished = false
local verifying = false
-- Globals, so done() can read them from each thread.
answered, c200, c202, c409, c410, c429, c503, cother = 0, 0, 0, 0, 0, 0, 0, 0
first_request_us, last_response_us, first_202_us, last_202_us = 0, 0, 0, 0
buyers = 0

function init(args)
  tokens = common.load_tokens(args)
  buyers = #tokens
  extra = wrk.format("GET", "/healthz", {["Content-Length"] = "0"}, nil)
  verifying = tonumber(wrk.thread:get("id")) == 0
end

function request()
  if verifying then
    verifying = false
    return extra
  end
  if next_index > #tokens then
    return extra
  end
  if next_index == 1 then first_request_us = now_us() end
  local token = tokens[next_index]
  next_index = next_index + 1
  return wrk.format("POST", nil, {["Authorization"] = token, ["Content-Length"] = "0"}, nil)
end

function response(status, headers, body)
  if status == 200 then
    c200 = c200 + 1
    return
  end
  local now = now_us()
  answered = answered + 1
  last_response_us = now
  if status == 202 then
    c202 = c202 + 1
    if first_202_us == 0 then first_202_us = now end
    last_202_us = now
  elseif status == 410 then c410 = c410 + 1
  elseif status == 409 then c409 = c409 + 1
  elseif status == 429 then c429 = c429 + 1
  elseif status == 503 then c503 = c503 + 1
  else cother = cother + 1 end
  if answered >= #tokens and not finished then
    finished = true
    io.write(string.format("SPIKE_DONE %d\n", wrk.thread:get("id")))
    io.stdout:flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local sums = {answered = 0, c200 = 0, c202 = 0, c409 = 0, c410 = 0, c429 = 0, c503 = 0,
                cother = 0, buyers = 0}
  local first_req, last_resp, first_202, last_202 = math.huge, 0, math.huge, 0
  for _, t in ipairs(threads) do
    for name, _ in pairs(sums) do sums[name] = sums[name] + t:get(name) end
    if t:get("first_request_us") > 0 then first_req = math.min(first_req, t:get("first_request_us")) end
    last_resp = math.max(last_resp, t:get("last_response_us"))
    if t:get("first_202_us") > 0 then first_202 = math.min(first_202, t:get("first_202_us")) end
    last_202 = math.max(last_202, t:get("last_202_us"))
  end
  if first_req == math.huge then first_req = 0 end
  if first_202 == math.huge then first_202 = 0 end
  common.write_summary(summary, latency,
    ',"answered":%d,"extra_200":%d,"s202":%d,"s409":%d,"s410":%d,"s429":%d,"s503":%d,'
      .. '"sother":%d,"buyers":%d,"first_request_us":%d,"last_response_us":%d,'
      .. '"first_202_us":%d,"last_202_us":%d',
    sums.answered, sums.c200, sums.c202, sums.c409, sums.c410, sums.c429, sums.c503,
    sums.cother, sums.buyers, first_req, last_resp, first_202, last_202)
end
