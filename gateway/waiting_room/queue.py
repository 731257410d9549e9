"""The queue of one sale in Redis (one hash slot per sale, so each step is one atomic script).

Places: whoever joins before the start is listed unplaced; at the start the list is sealed
(later joins are placed first-come behind it, from ``next``) and shuffled once — uniformly, by
the gateway's CSPRNG — then every early arrival's place is written in one script, so all of
them are placed or none (another gateway retries a seal that died half-way). The start is
judged by Redis's clock, the one every gateway shares: a gateway whose own clock runs ahead
cannot seal early.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, NamedTuple

from redis.asyncio.cluster import RedisCluster

from shard_router.deadline import with_deadline

_SHUFFLE = random.SystemRandom()
KEPT_AFTER_END_S = 7 * 86400  # a room's keys outlive its sale this long: its fairness report
# A burst of joins shares the router's cluster client, whose pools are bounded: past them a
# call fails at once (MaxConnectionsError), so joins wait their turn here instead.
_CALLS = asyncio.Semaphore(64)

# KEYS: joined, meta, early, addresses. ARGV: buyer, now_ms, client address, expire_at (epoch
# s). → "place:issued_ms" (place 0: early). Counts tickets per address for the fairness report.
# Every key of the room expires a while after the sale ends (kept for the fairness report).
_JOIN = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return v end
redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
local place = 0
if redis.call('HEXISTS', KEYS[2], 'sealed') == 1 then
  place = redis.call('HINCRBY', KEYS[2], 'next', 1)
else
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
v = place .. ':' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], v)
for i = 1, 4 do redis.call('EXPIREAT', KEYS[i], ARGV[4]) end
return v
"""
# KEYS: meta, early. ARGV: starts_at_ms. → the early arrivals, nil once placed, or -1 while
# Redis's clock is before the start.
_SEAL = """
if redis.call('HEXISTS', KEYS[1], 'placed') == 1 then return nil end
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) < tonumber(ARGV[1]) then
  return -1
end
if redis.call('HSETNX', KEYS[1], 'sealed', 1) == 1 then
  redis.call('HSET', KEYS[1], 'next', redis.call('LLEN', KEYS[2]))
end
return redis.call('LRANGE', KEYS[2], 0, -1)
"""
# KEYS: joined, meta. ARGV: buyer1, buyer2, … in their shuffled order (issued: Redis's clock).
_PLACE = """
if redis.call('HEXISTS', KEYS[2], 'placed') == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], i .. ':' .. now) end
redis.call('HSET', KEYS[2], 'placed', 1)
return 1
"""
# The room's controls (controls.py), first in both scripts below. KEYS: meta. ARGV: version,
# paused (0/1), rate per s, expire_at (epoch s), as PostgreSQL holds them. A version newer than
# the meta's is applied (an older one, a gateway's stale copy, never wins); Redis's clock says
# when. A pause, and the resume after it, start the admissions' clock afresh (no backlog for
# the paused time); a new rate applies from now: the fraction of a place owed at the old rate
# stays owed, none is owed for the time before at the new one.
_CONTROLS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local version = tonumber(ARGV[1])
if version > tonumber(redis.call('HGET', KEYS[1], 'version') or '-1') then
  local last = redis.call('HGET', KEYS[1], 'last_ms')
  local old = tonumber(redis.call('HGET', KEYS[1], 'rate') or ARGV[3])
  if ARGV[2] == '1' or redis.call('HGET', KEYS[1], 'paused') == '1' then
    last = now
  elseif last then
    last = now - (now - tonumber(last)) * old / tonumber(ARGV[3])
  end
  redis.call('HSET', KEYS[1], 'version', version, 'paused', ARGV[2], 'rate', ARGV[3])
  if last then redis.call('HSET', KEYS[1], 'last_ms', string.format('%.3f', last)) end
  redis.call('EXPIREAT', KEYS[1], ARGV[4])
end
local held = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
local paused = tonumber(redis.call('HGET', KEYS[1], 'paused') or '0')
local rate = tonumber(redis.call('HGET', KEYS[1], 'rate') or '0')
"""
# ARGV as _CONTROLS's. → {version, paused, rate, frontier, joined, spent} as Redis has them.
_CONTROL = (
    _CONTROLS
    + """
local v = redis.call('HMGET', KEYS[1], 'frontier', 'next', 'spent')
return {held, paused, rate, tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')}
"""
)
# KEYS: meta. ARGV: _CONTROLS's, units left (-1: unknown), admission ms.
# → {frontier, spent, joined, version, paused, rate}.
# Redis's clock, so every gateway's tick agrees and several tickers never speed it up. Places
# 1..frontier are admitted; places 1..spent were admitted before a sell-out (or their
# admission has run out), so they can no longer buy. Until the first sell-out the frontier
# moves at the rate; after it, a freed unit is re-offered to exactly one next place per unit
# left (still at most the rate), and again to the following places once those admissions ran
# out unused. It never moves before the places are fixed, while the room is paused, while
# nothing is left or unknown, or past the last joined place.
_ADVANCE = (
    _CONTROLS
    + """
if redis.call('HEXISTS', KEYS[1], 'placed') == 0 then return {-1, 0, 0, held, paused, rate} end
local left, window = tonumber(ARGV[5]), tonumber(ARGV[6])
local f = tonumber(redis.call('HGET', KEYS[1], 'frontier') or '0')
local last = tonumber(redis.call('HGET', KEYS[1], 'last_ms') or now)
local joined = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
local spent = redis.call('HGET', KEYS[1], 'spent')
if left == 0 and spent ~= tostring(f) then
  redis.call('HSET', KEYS[1], 'spent', f)  -- sold out: every admission so far is used up
  spent = tostring(f)
end
if paused == 1 or left <= 0 or f >= joined then
  redis.call('HSET', KEYS[1], 'last_ms', now)  -- stopped: no backlog of admissions builds up
  return {f, tonumber(spent or '0'), joined, held, paused, rate}
end
local n = math.floor((now - last) * rate / 1000)
if n > rate then n = rate; last = now - 1000 end  -- a burst of at most one second
if spent then
  spent = tonumber(spent)
  local offered = tonumber(redis.call('HGET', KEYS[1], 'offered_ms') or '0')
  if f >= spent + left and now - offered >= window then
    spent = f  -- the re-offered places let their admissions run out: offer the next ones
    redis.call('HSET', KEYS[1], 'spent', spent)
  end
  local want = spent + left - f
  if want <= 0 then
    redis.call('HSET', KEYS[1], 'last_ms', now)
    return {f, spent, joined, held, paused, rate}
  end
  if n >= want then n = want; last = now - n * 1000 / rate end
  if n > 0 then redis.call('HSET', KEYS[1], 'offered_ms', now) end
end
if n > 0 then
  n = math.min(n, joined - f)
  f = f + n
  last = last + n * 1000 / rate
end
redis.call('HSET', KEYS[1], 'frontier', f, 'last_ms', string.format('%.3f', last))
return {f, tonumber(spent or '0'), joined, held, paused, rate}
"""
)


def _keys(sale: int) -> tuple[str, str, str, str]:
    tag = f"{{room:{sale}}}"
    return f"{tag}:joined", f"{tag}:meta", f"{tag}:early", f"{tag}:addresses"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _place(value: Any) -> tuple[int, int]:
    place, _, issued = _text(value).partition(":")
    return int(place), int(issued)


async def join(
    client: RedisCluster, sale: int, buyer: int, now_ms: int, address: str, ends_at_s: float
) -> tuple[int, int]:
    """(place, issued_ms) of the buyer's one ticket: joining again returns the same."""
    expire_at = int(ends_at_s) + KEPT_AFTER_END_S
    async with _CALLS:
        call = client.eval(_JOIN, 4, *_keys(sale), buyer, now_ms, address, expire_at)
        return _place(await with_deadline(call, client=client))


async def place_of(client: RedisCluster, sale: int, buyer: int) -> tuple[int, int] | None:
    async with _CALLS:
        value = await with_deadline(client.hget(_keys(sale)[0], str(buyer)), client=client)
    return None if value is None else _place(value)


async def fix_places(client: RedisCluster, sale: int, starts_at_ms: int) -> bool:
    """Once Redis's clock reaches the start: seal the early arrivals and give them a uniformly
    random order (a no-op once placed). → whether the places are fixed."""
    joined, meta, early, _ = _keys(sale)
    buyers = await with_deadline(client.eval(_SEAL, 2, meta, early, starts_at_ms), client=client)
    if buyers is None:
        return True
    if buyers == -1:
        return False
    order = list(buyers)
    _SHUFFLE.shuffle(order)
    await with_deadline(client.eval(_PLACE, 2, joined, meta, *order), client=client)
    return True


class Controls(NamedTuple):
    """What a room's controls are, in PostgreSQL (the record) or as Redis applied them."""

    version: int  # how many changes the record has had; Redis holds the newest it applied
    paused: bool
    rate: int  # admissions per second


class Advanced(NamedTuple):
    frontier: int  # places 1..frontier are admitted (-1: the places are not fixed yet)
    spent: int  # places up to here can no longer buy
    joined: int  # places given
    controls: Controls  # as Redis applied them: what this gateway's polls answer by


class Applied(NamedTuple):
    controls: Controls
    frontier: int
    joined: int
    spent: int


def _controls_args(controls: Controls, ends_at_s: float) -> tuple[int, ...]:
    expire_at = int(ends_at_s) + KEPT_AFTER_END_S
    return controls.version, int(controls.paused), controls.rate, expire_at


async def apply_controls(
    client: RedisCluster, sale: int, controls: Controls, ends_at_s: float
) -> Applied:
    """Apply the record's controls (a no-op if Redis has this version or a newer one) → what
    Redis holds now. ``Controls(-1, …)`` only reads."""
    args = _controls_args(controls, ends_at_s)
    version, paused, rate, frontier, joined, spent = await with_deadline(
        client.eval(_CONTROL, 1, _keys(sale)[1], *args), client=client
    )
    return Applied(_controls(version, paused, rate), int(frontier), int(joined), int(spent))


def _controls(version: Any, paused: Any, rate: Any) -> Controls:
    return Controls(int(version), bool(paused), int(rate))


async def advance(
    client: RedisCluster,
    sale: int,
    controls: Controls,
    ends_at_s: float,
    units_left: int | None,
    admission_s: int,
) -> Advanced:
    """This tick's frontier: ``controls`` (the record as this gateway last read it) are applied
    first if Redis has an older version."""
    left = -1 if units_left is None else units_left
    args = (*_controls_args(controls, ends_at_s), left, admission_s * 1000)
    frontier, spent, joined, *held = await with_deadline(
        client.eval(_ADVANCE, 1, _keys(sale)[1], *args), client=client
    )
    return Advanced(int(frontier), int(spent), int(joined), _controls(*held))


class Snapshot(NamedTuple):
    early: list[int]  # who joined before the start, in the order Redis saw them
    places: dict[int, tuple[int, int]]  # buyer → (place, issued_ms)
    addresses: dict[str, int]  # client address → tickets
    frontier: int
    spent: int


async def snapshot(client: RedisCluster, sale: int) -> Snapshot:
    """The whole queue of a sale, for the fairness report (flashsale/observe/fairness.py)."""
    joined, meta, early, addresses = _keys(sale)

    async def read(call: Any) -> Any:
        return await with_deadline(call, client=client)

    fields = await read(client.hgetall(meta))
    return Snapshot(
        [int(b) for b in await read(client.lrange(early, 0, -1))],
        {int(b): _place(v) for b, v in (await read(client.hgetall(joined))).items()},
        {_text(a): int(n) for a, n in (await read(client.hgetall(addresses))).items()},
        int(fields.get(b"frontier", 0)),
        int(fields.get(b"spent", 0)),
    )
