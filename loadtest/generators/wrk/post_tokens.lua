-- wrk script: a POST per request, each with the next buyer token of a slice of a token file, so
-- no buyer is seen twice in one run; a JSON summary at the end.
-- Usage: wrk -t <n> -s post_tokens.lua <url> -- <token file> <first line> <line count> <n>
-- Thread i of n takes lines first + i, first + i + n, ... (disjoint slices); it wraps around
-- (and reuses tokens) only when its slice runs out, which shows up as 409s in the status errors.
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local tokens = {}
local next_index = 1

function init(args)
  local path, first, count = args[1], tonumber(args[2]), tonumber(args[3])
  local step = tonumber(args[4] or 1)
  local id = tonumber(wrk.thread:get("id"))
  local line_no = 0
  for line in io.lines(path) do
    if line_no >= first + count then break end
    if line_no >= first and (line_no - first) % step == id then
      tokens[#tokens + 1] = "Bearer " .. line
    end
    line_no = line_no + 1
  end
  if #tokens == 0 then error("no tokens in " .. path) end
end

function request()
  local token = tokens[next_index]
  next_index = next_index + 1
  if next_index > #tokens then next_index = 1 end
  return wrk.format("POST", nil, {["Authorization"] = token, ["Content-Length"] = "0"}, nil)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,'
      .. '"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d,'
      .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
