-- What the wrk scripts here share: numbering the threads, reading a thread's slice of a token
-- file, and the one-line JSON summary (WRK_JSON) that loadtest/generators/wrk.py reads back.
-- A script loads it with: package.path = <its own directory> .. "?.lua;" .. package.path
local common = {}

local counter = 0

-- In setup(): thread i (0, 1, ...) gets id i, for its slice of the token file.
function common.number(thread)
  thread:set("id", counter)
  counter = counter + 1
end

-- In init(args): thread i of n takes lines first + i, first + i + n, ... of the token file
-- (disjoint slices, so no buyer is seen twice), each as an Authorization header value.
-- args: <token file> <first line> <line count> [<n>]
function common.load_tokens(args)
  local path, first, count = args[1], tonumber(args[2]), tonumber(args[3])
  local step = tonumber(args[4] or 1)
  local id = tonumber(wrk.thread:get("id"))
  local tokens = {}
  local line_no = 0
  for line in io.lines(path) do
    if line_no >= first + count then break end
    if line_no >= first and (line_no - first) % step == id then
      tokens[#tokens + 1] = "Bearer " .. line
    end
    line_no = line_no + 1
  end
  if #tokens == 0 then error("no tokens in " .. path) end
  return tokens
end

-- In done(): the WRK_JSON line, wrk's own figures first, then ``extra`` (a format string of
-- further ',"name":%d' fields) filled with the remaining arguments.
function common.write_summary(summary, latency, extra, ...)
  local e = summary.errors
  local values = {
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean,
  }
  for i = 1, select("#", ...) do values[#values + 1] = select(i, ...) end
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,'
      .. '"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d,'
      .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f'
      .. (extra or "") .. '}\n',
    unpack(values)))
end

return common
