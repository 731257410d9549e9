-- wrk script: the same POST on every request (no token), a JSON summary at the end.
-- Usage: wrk -s post.lua <url>
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

wrk.method = "POST"
wrk.headers["Content-Length"] = "0"

function done(summary, latency, requests)
  common.write_summary(summary, latency)
end
