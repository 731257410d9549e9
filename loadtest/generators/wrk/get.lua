-- wrk script: the same GET on every request (headers from wrk's -H), a JSON summary at the end.
-- Usage: wrk -s get.lua -H "Authorization: Bearer ..." -H "X-Queue-Ticket: ..." <url>
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

function done(summary, latency, requests)
  common.write_summary(summary, latency)
end
