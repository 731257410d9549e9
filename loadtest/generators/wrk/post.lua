-- wrk script: the same POST on every request (no token), a JSON summary at the end.
-- Usage: wrk -s post.lua <url>
wrk.method = "POST"
wrk.headers["Content-Length"] = "0"

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
