"""Admission: shed what the process cannot serve in time, before it costs anything, and queue
what it can.

A burst is not a standing queue. A thousand buyers arriving at once are all let in; the process
answers them within a few hundred milliseconds, and refusing the tail of such a burst throws away
sales it had the capacity for. What must be refused is a queue that *stays*: load arriving
faster than the process answers it, for longer than a burst lasts. Admission tells the two apart
as CoDel does, over an interval rather than from an instant's backlog, with the queue's own
sojourn times as the signal:

- *behind*: the reservations that finished (``flashsale_reservation_seconds``, Redis and the
  Kafka acknowledgement, observed by the purchase handler for every 202) all took longer than
  the target for a whole interval: even the luckiest request of that interval waited, so a queue
  is standing. New requests are refused until the queue has drained: one reservation finishes
  within the target, or none finishes for a target's length (nothing left in flight).
- *in flight*: the design's in-flight cap. A request arriving while the process already holds
  ``limit`` admitted requests is refused. The limit is Little's law with the budget: the best
  answer rate of the last 5 s times the budget (1 s by default), so the requests held are those
  the process answers within its budget, and never below a floor (``admission_min_in_flight``)
  that lets a sale's first burst in before any rate is known. This rule sees the overload the
  reservations cannot: with thousands of requests outstanding the loop itself is the queue,
  every coroutine waits its turn, and a reservation's own Redis and Kafka time stays short
  while its request has waited seconds (measured: 4x a pinned gateway's capacity through 2,048
  connections, no refusal without the cap; with it 59% shed, accepted p99 0.5 s at a 250 ms
  budget, tests/system/test_bursts.py).
- *waited*: a hard bound on one request's wait. A request started more than the budget (1 s)
  after its loop turn began was queued before that turn, so it has waited at least that long;
  its buyer has given up or is about to, and the answer would be useless.

A single long turn (a GC pause) or one burst's long turns are neither: the next request after
them goes on. A refusal costs what the sold-out flag's answer costs (no coroutine beyond the ASGI
call, two pre-built messages); work already admitted is never dropped halfway.

Why the reservations and not the loop: with admission off, one gateway offered 4× its rate for
3 s (vegeta, open loop, this 2-core machine at load 6-10) answered 202s 1.3-2.4 s late while
99% of its loop turns stayed ≤ 50 ms (``flashsale_event_loop_turn_seconds``, exported here):
the queue forms in the reservation stage (Redis pipelines, WAIT, the Kafka producer's batches),
not in the loop's ready queue, so a turn-based rule either misses it or, made strict enough to
see it, fires on a burst's few long turns. That is what the old rules did: a request started
50 ms into its turn was refused at once, and so was everything while two long turns followed
each other; a burst of 300 buyers (0.6 s of the process's closed-loop rate) got 181 × 503.

The thresholds (settings ``admission_target_ms`` 250, ``admission_interval_ms`` 500). A
reservation's time is its service (WAIT on a replica, Kafka's acks=all on RF 3) plus its queue,
so the target sits above the service time of a busy machine: at 50 ms / 200 ms the full suite's
fault rows, 200 purchases/s on this 2-core machine at load 5-8, got 189-826 × 503 OVERLOADED
before any fault (every reservation of 200 ms slower than 50 ms with no queue standing). At
250 ms / 500 ms, on a quiet machine: a burst of 520 (0.5 s of the measured 1,040 202/s) all
202 within 0.25 s, and 4x the rate for 3 s still shed (599 of 7,078, goodput 1,755 202/s).
Earlier, at load 5-14: with admission off, 98-99% of the loop's turns stayed ≤ 50 ms at the
closed-loop rate and under bursts (so a turn rule at 50 ms fires only on a burst's few long
turns), and bursts of 0.5 and 1 s of the measured rate (197 and 395 buyers at 395/s) were all
answered 202 within 0.31 and 0.44 s. The target is judged at the reservation histogram's bound
at or below it (50 ms and 250 ms are bounds). With a 200 ms interval bursts of 478 and 957 (0.5
and 1 s of the closed-loop rate then) were all answered 202 within 0.53 and 1.03 s, and 4× the
rate for 3 s was shed (2,408 of 4,873 answered 503) with goodput 1.75× the closed-loop rate; a
longer interval delays the reaction to real overload (the queue grows for an interval before it
is seen). tests/system/test_bursts.py measures both again on each run.

Idle, it costs nothing measurable. The 1 ms tick alone kept an idle gateway's loop at ~0.03
core (a uvloop loop with it, nothing else: 0.32-0.36 CPU s in 10 s); so once nothing has been
in flight or answered for ``IDLE_AFTER_S`` the tick slows to every ``IDLE_TICK_S`` (~0.001
core), and the next request admitted brings the 1 ms tick back. The slow tick still starts
turns, so a request queued behind a stall of an idle process is still judged by its wait
(leniently: it may have waited up to one slow period more); its intervals are not turns and are
not observed. Answers from the sold-out flag and the probes never pass admission, so they
neither wake it nor keep it awake.

What this cannot see: requests granian has parsed but not yet handed over (its thread needs
the GIL the busy loop holds), and requests still in the kernel or at the client. Those wait
before the clock starts; see the overload section of bench.md (loadtest/bench/overload.py).
"""

from __future__ import annotations

import asyncio
import bisect
import sys
import time

from prometheus_client import Gauge

from gateway import metrics
from gateway.errors import Overloaded
from gateway.hot_counters import HotCounter, HotHistogram
from gateway.responses import render

_now = time.monotonic
TICK_S = 0.001  # uvloop's timer resolution: a turn shorter than this is not told apart
# Nothing in flight or answered for this long (the rate slot's length, past the target and
# the interval, so the controller's state has settled): tick every IDLE_TICK_S instead.
IDLE_AFTER_S, IDLE_TICK_S = 1.0, 0.1
# A request that has waited this long before its handler starts is refused: the spike's
# promise is an answer within about a second, and past it the buyer has gone (the setting
# admission_budget_ms).
BUDGET_S = 1.0
# The in-flight cap's floor, and the answer rate it follows: the best of the last 5 whole
# seconds, so a pause of a second or two does not shrink the cap a burst needs right after.
# (Slots of 200 ms were too short: after a stall a slot answers two slots' worth, and the cap
# followed that peak to twice what the process answers in a second.)
MIN_IN_FLIGHT = 1024
RATE_SLOT_S, RATE_SLOTS = 1.0, 5

# The refusal, pre-rendered as ASGI messages (a server only reads them). The balancer's own
# 503 is rendered from the same error (flashsale/fleet/haproxy.py).
OVERLOADED = Overloaded()
_status, _headers, _body = render(OVERLOADED)
OVERLOADED_START = {"type": "http.response.start", "status": _status, "headers": _headers}
OVERLOADED_BODY = {"type": "http.response.body", "body": _body}

REFUSED = HotCounter(
    "flashsale_admission_refused_total",
    "Requests answered 503 OVERLOADED before any work: waited (queued past the latency budget) "
    "or behind (every reservation of the last interval took longer than the target)",
    ("reason",),
    [("waited",), ("behind",), ("in_flight",)],
)
IN_FLIGHT = Gauge(
    "flashsale_admission_in_flight",
    "Requests admitted and not yet answered, and the cap a new one is judged against",
    ["kind"],
    registry=metrics.REGISTRY,
)
TURNS = HotHistogram(
    "flashsale_event_loop_turn_seconds",
    "How long the event loop took between two of admission's 1 ms ticks (its turn length); "
    "measured while the process admits requests and for a second after (idle, it ticks slowly "
    "and observes nothing)",
    (0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
metrics.REGISTRY.register(REFUSED)
metrics.REGISTRY.register(TURNS)
SOJOURNS = metrics.RESERVATION_SECONDS  # the queue's sojourn times, observed by purchase.py


class Admission:
    def __init__(
        self,
        target_s: float,
        interval_s: float,
        budget_s: float = BUDGET_S,
        min_in_flight: int = MIN_IN_FLIGHT,
        idle_after_s: float = IDLE_AFTER_S,
    ) -> None:
        self.target = target_s
        self.interval = interval_s
        self.budget = budget_s
        self.in_flight = 0  # admitted, not answered yet
        self.min_in_flight = min_in_flight
        self.limit = min_in_flight
        self._answered = 0  # answers since the current rate slot began
        self._rates = [0.0] * RATE_SLOTS  # answers a second, one per slot of the last seconds
        self.turn_started = self._slot_started = _now()
        self.behind = False
        self._slow_since: float | None = None  # every reservation since then took too long
        self._last_done = self.turn_started  # when a reservation last finished
        self._done = self._within = 0  # the sojourn histogram's counts at the last tick
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.idle_after = idle_after_s
        self.idle = False  # ticking every IDLE_TICK_S: nothing to serve for a while
        self._active_at = self.turn_started  # a tick last saw work in flight or answered
        self._answered_seen = 0  # self._answered at the last tick
        self._woke_at = self.turn_started  # a slow tick's interval is no turn: measure from here
        self._counts = REFUSED.counts
        self._set_bound()

    def admit(self) -> bool:
        """May a request that starts now go on? (The hot path: a clock read and four tests.)"""
        if self.behind:
            self._counts[("behind",)] += 1
            return False
        waited = _now() - self.turn_started
        # Idle, turn_started is the last slow tick, up to IDLE_TICK_S before this turn began.
        if waited > self.budget and (not self.idle or waited > self.budget + IDLE_TICK_S):
            self._counts[("waited",)] += 1
            return False
        if self.in_flight >= self.limit:
            self._counts[("in_flight",)] += 1
            return False
        self.in_flight += 1
        if self.idle:
            self._wake()
        return True

    def answered(self) -> None:
        """An admitted request has been answered (whatever its outcome)."""
        self.in_flight -= 1
        self._answered += 1

    def start(self) -> None:
        if self.target <= 0:  # off: turns are still measured (and exported), nothing refused
            self.target = self.interval = self.budget = float("inf")
            self.min_in_flight = self.limit = sys.maxsize
            self._set_bound()
        self.turn_started = self._last_done = self._slot_started = _now()
        self._done, self._within = self._sojourn_counts()
        self._active_at = self.turn_started
        self.idle = False
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(TICK_S, self._tick)

    def _wake(self) -> None:
        """The first request admitted while idle: tick every 1 ms again from now."""
        self.idle = False
        self._active_at = self._woke_at = _now()
        if self._timer is not None and self._loop is not None:
            self._timer.cancel()
            self._timer = self._loop.call_later(TICK_S, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _set_bound(self) -> None:
        # Sojourns within the target: the histogram's buckets up to its bound at or below it.
        self._within_buckets = bisect.bisect_right(SOJOURNS.bounds, self.target)

    def _sojourn_counts(self) -> tuple[int, int]:
        counts = SOJOURNS.counts
        return sum(counts), sum(counts[: self._within_buckets])

    def _tick(self) -> None:
        now = _now()
        if not self.idle:
            TURNS.observe(now - max(self.turn_started, self._woke_at))
        done, within = self._sojourn_counts()
        self.observe_sojourns(done - self._done, within - self._within, now)
        self._done, self._within = done, within
        answered = self._answered
        if (
            self.in_flight
            or answered != self._answered_seen
            or self.behind
            or self._slow_since is not None
        ):
            self._active_at = now
        self._answered_seen = answered
        if now - self._slot_started >= RATE_SLOT_S:
            self.close_rate_slot(now)
            self._answered_seen = 0
        self.idle = now - self._active_at >= self.idle_after
        self.turn_started = now
        assert self._loop is not None
        self._timer = self._loop.call_later(IDLE_TICK_S if self.idle else TICK_S, self._tick)

    def close_rate_slot(self, now: float) -> None:
        """Close the current slot of the answer rate and move the cap: the peak rate of the
        last RATE_SLOTS slots times the budget, never below the floor."""
        self._rates.pop(0)
        self._rates.append(self._answered / (now - self._slot_started))
        self._answered = 0
        self._slot_started = now
        if self.min_in_flight < sys.maxsize:
            self.limit = max(self.min_in_flight, int(max(self._rates) * self.budget))
        IN_FLIGHT.labels("admitted").set(self.in_flight)
        IN_FLIGHT.labels("limit").set(self.limit)

    def observe_sojourns(self, done: int, within: int, now: float) -> None:
        """``done`` reservations finished since the last tick, ``within`` of them within the
        target; ``now`` is the tick's time. CoDel's test: the minimum sojourn over an interval
        above the target."""
        if within:  # a request went through without queueing: no standing queue
            self._slow_since = None
            self.behind = False
        elif done:
            if self._slow_since is None:
                self._slow_since = now
            elif now - self._slow_since >= self.interval:
                self.behind = True
        else:
            quiet = now - self._last_done
            if self.behind and quiet >= self.target:  # the queue has drained
                self.behind = False
                self._slow_since = None
            elif quiet >= self.interval:  # no evidence of a queue for a whole interval
                self._slow_since = None
        if done:
            self._last_done = now
