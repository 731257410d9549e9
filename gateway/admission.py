"""Admission: shed what the process cannot serve in time, before it costs anything.

granian hands each request to the event loop with ``call_soon_threadsafe``: it waits in the
loop's ready queue, invisible to the in-flight cap, until the loop gets to it. uvloop runs that
queue in turns (everything queued when a turn starts), then polls for I/O, then runs its
timers. A timer due every millisecond therefore runs once per turn, just before the next one
starts, and marks when it started:

- a request started ``now - turn_started`` after its turn began was queued before the turn
  began, so it has waited at least that long: past the target it is answered 503 at once
  (*waited*);
- if every turn for a whole interval overran the target, a queue is standing (CoDel's test:
  even the luckiest request waited too long), and new requests are refused until a turn ends
  within it (*behind*).

A refusal costs what the sold-out flag's answer costs (no coroutine beyond the ASGI call, two
pre-built messages); work already admitted is never dropped halfway.

The thresholds (settings ``admission_target_ms`` 50, ``admission_interval_ms`` 100) come from
the turn histogram this module exports, measured with admission off on the reserve path (one
process pinned, open loop, 2,048 connections): at a quarter of its closed-loop maximum 98.2% of
turns took ≤ 20 ms and 99.85% ≤ 50 ms; at half of it 89% ≤ 20 ms and 98.4% ≤ 50 ms (Kafka's
5 ms linger and the Redis replies come back in batches, and each batch's requests finish in one
turn). A 5 ms target refused 20% of a half-load; 20 ms still 3.5%; at 50 ms refusals start
where the load does not fit. 100 ms is CoDel's interval: two whole turns over the target.

What this cannot see: requests granian has parsed but not yet handed over (its thread needs
the GIL the busy loop holds), and requests still in the kernel or at the client. Those wait
before the clock starts; see the overload benchmark (loadtest/bench/overload.py).
"""

from __future__ import annotations

import asyncio
import time

from gateway import metrics
from gateway.errors import Overloaded
from gateway.hot_counters import HotCounter, HotHistogram
from gateway.responses import render

_now = time.monotonic
TICK_S = 0.001  # uvloop's timer resolution: a turn shorter than this is not told apart

# The refusal, pre-rendered as ASGI messages (a server only reads them). The balancer's own
# 503 is rendered from the same error (flashsale/fleet/haproxy.py).
OVERLOADED = Overloaded()
_status, _headers, _body = render(OVERLOADED)
OVERLOADED_START = {"type": "http.response.start", "status": _status, "headers": _headers}
OVERLOADED_BODY = {"type": "http.response.body", "body": _body}

REFUSED = HotCounter(
    "flashsale_admission_refused_total",
    "Requests answered 503 OVERLOADED before any work: waited (queued past the target) or "
    "behind (every loop turn of the last interval overran the target)",
    ("reason",),
    [("waited",), ("behind",)],
)
TURNS = HotHistogram(
    "flashsale_event_loop_turn_seconds",
    "How long the event loop took between two of admission's 1 ms ticks (its turn length)",
    (0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
metrics.REGISTRY.register(REFUSED)
metrics.REGISTRY.register(TURNS)


class Admission:
    def __init__(self, target_s: float, interval_s: float) -> None:
        self.target = target_s
        self.interval = interval_s
        self.turn_started = _now()
        self.behind = False
        self._over_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._counts = REFUSED.counts

    def admit(self) -> bool:
        """May a request that starts now go on? (The hot path: a clock read and two tests.)"""
        if self.behind:
            self._counts[("behind",)] += 1
            return False
        if _now() - self.turn_started > self.target:
            self._counts[("waited",)] += 1
            return False
        return True

    def start(self) -> None:
        if self.target <= 0:  # off: turns are still measured (and exported), nothing refused
            self.target = self.interval = float("inf")
        self.turn_started = _now()
        self._timer = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        now = _now()
        self.observe_turn(now - self.turn_started, now)
        self.turn_started = now
        self._timer = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def observe_turn(self, turn: float, now: float) -> None:
        """A turn of ``turn`` seconds just ended at ``now``."""
        TURNS.observe(turn)
        if turn - TICK_S <= self.target:
            self._over_since = None
            self.behind = False
        elif self._over_since is None:
            self._over_since = now - turn
        elif now - self._over_since >= self.interval:
            self.behind = True
