-- wrk script: a POST per request, each with the next buyer token of a slice of a token file, so
-- no buyer is seen twice in one run; a JSON summary at the end.
-- Usage: wrk -t <n> -s post_tokens.lua <url> -- <token file> <first line> <line count> <n>
-- Thread i of n takes lines first + i, first + i + n, ... (disjoint slices); it wraps around
-- (and reuses tokens) only when its slice runs out, which shows up as 409s in the status errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local common = require("common")

setup = common.number

local tokens = {}
local next_index = 1

function init(args)
  tokens = common.load_tokens(args)
end

function request()
  local token = tokens[next_index]
  next_index = next_index + 1
  if next_index > #tokens then next_index = 1 end
  return wrk.format("POST", nil, {["Authorization"] = token, ["Content-Length"] = "0"}, nil)
end

function done(summary, latency, requests)
  common.write_summary(summary, latency)
end
