"""The open-loop generator (loadtest/generators/openloop.py) with a rate that steps, and its
latencies kept per kind of answer, for the overload benchmark.

Phases run back to back: a warm-up (not recorded), the measured phase (accepted and refused
answers in histograms of their own) and an after phase at a normal rate, whose 100 ms windows
say when the server was back: the recovery. Latency is from each request's intended send time,
as in openloop.py (no coordinated omission).

``python -m loadtest.generators.phased URL --phase RATE:SECONDS ... [--tokens FILE] --accepted 202``
prints one ``PHASED_JSON {...}`` line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from loadtest.generators import openloop
from loadtest.measure import child
from loadtest.measure.latency import Latencies

SUMMARY_PREFIX = "PHASED_JSON "
WINDOW_S = 0.1
REFUSALS = (429, 503)
WARMUP, MEASURED, AFTER = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Phase:
    rate: float
    seconds: float


class PhasedLoop(openloop.OpenLoop):
    def __init__(self, plan: openloop.Plan, phases: list[Phase], accepted: int) -> None:
        super().__init__(plan)
        self.phases = phases
        self.accepted = accepted
        self.kinds = {k: Latencies() for k in ("ok", "refused")}
        self.counts = {"ok": 0, "refused": 0, "other": 0}
        self.goodput = 0
        # After phase: 100 ms window of intended time → [answers, bad answers, max latency µs]
        self.windows: dict[int, list[int]] = {}
        self.phase_starts: list[float] = []
        self.after_start = 0.0

    def completed(self, conn: openloop.Connection, status: int) -> None:
        now = time.perf_counter()
        self.in_flight -= 1
        self.answered_total += 1
        latency_s = now - conn.intended
        self.statuses[status] += 1
        phase = self._phase(conn.intended)
        good = status == self.accepted
        if good and self.phase_starts[MEASURED] <= now < self.after_start:
            self.goodput += 1  # answered while the overload lasted
        if phase == MEASURED:
            kind = "ok" if good else "refused" if status in REFUSALS else "other"
            self.counts[kind] += 1
            if kind != "other":
                self.kinds[kind].add_s(latency_s)
            self.histogram.add_s(latency_s)
        elif phase == AFTER:
            window = self.windows.setdefault(
                int((conn.intended - self.after_start) / WINDOW_S), [0, 0, 0]
            )
            window[0] += 1
            window[1] += not good
            window[2] = max(window[2], int(latency_s * 1e6))
        self._next(conn)

    def _phase(self, intended: float) -> int:
        if intended < self.phase_starts[MEASURED]:
            return WARMUP
        return MEASURED if intended < self.after_start else AFTER

    async def run(self) -> dict[str, Any]:
        await self._connect()
        self.start = time.perf_counter() + 0.01
        begin = self.start
        for phase in self.phases:
            self.phase_starts.append(begin)
            begin += phase.seconds
        self.after_start = self.phase_starts[AFTER] if len(self.phases) > AFTER else begin
        sent = 0
        for phase, begin in zip(self.phases, self.phase_starts, strict=True):
            total = int(phase.rate * phase.seconds)
            await self._send(begin, phase.rate, total, sent)
            sent += total
        await self._drain()
        unanswered = sum(c.busy for c in self.connections) + len(self.queue)
        self._close()
        return self._report(unanswered)

    def _report(self, unanswered: int) -> dict[str, Any]:
        measured = self.phases[MEASURED]
        return {
            "offered_rps": measured.rate,
            "seconds": measured.seconds,
            "goodput_rps": self.goodput / measured.seconds,
            "refused_rps": self.counts["refused"] / measured.seconds,
            "counts": self.counts,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "ok_p50_ms": self.kinds["ok"].ms(50),
            "ok_p99_ms": self.kinds["ok"].ms(99),
            "refused_p50_ms": self.kinds["refused"].ms(50),
            "refused_p99_ms": self.kinds["refused"].ms(99),
            "all_p99_ms": self.histogram.ms(99),
            "dispatch_lag_p99_ms": self.dispatch_lag.ms(99),
            "max_queue": self.max_queue,
            "unanswered": unanswered,
            "errors": self.errors,
            "after_windows": [self.windows.get(i, [0, 0, 0]) for i in range(self._after_windows())],
        }

    def _after_windows(self) -> int:
        return int(self.phases[AFTER].seconds / WINDOW_S) if len(self.phases) > AFTER else 0


def recovery_s(windows: list[list[int]], bound_ms: float) -> float | None:
    """Seconds from the end of the overload until every later window was answered, all
    accepted, none slower than ``bound_ms``; None if it never was."""
    last_bad = -1
    for i, (answers, bad, max_us) in enumerate(windows):
        if not answers or bad or max_us > bound_ms * 1000:
            last_bad = i
    if last_bad == len(windows) - 1:
        return None
    return (last_bad + 1) * WINDOW_S


def measure(
    url: str,
    phases: list[Phase],
    *,
    accepted: int,
    connections: int,
    core: int | str,
    tokens: Path | None,
    timeout_s: float,
) -> dict[str, Any]:
    """One phased run in a subprocess pinned to ``core``; its summary."""
    argv = [sys.executable, "-m", "loadtest.generators.phased", url, "--accepted", str(accepted)]
    argv += ["--connections", str(connections)]
    for phase in phases:
        argv += ["--phase", f"{phase.rate:g}:{phase.seconds:g}"]
    if tokens is not None:
        argv += ["--tokens", str(tokens)]
    return child.summary(argv, SUMMARY_PREFIX, what="phased load", timeout_s=timeout_s, core=core)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generators.phased", description=__doc__
    )
    parser.add_argument("url")
    parser.add_argument("--phase", action="append", required=True, help="RATE:SECONDS")
    parser.add_argument("--accepted", type=int, required=True, help="the status that is goodput")
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--drain", type=float, default=10.0)
    parser.add_argument("--tokens", type=Path)
    args = parser.parse_args()
    phases = [Phase(float(r), float(s)) for r, s in (p.split(":") for p in args.phase)]
    count = int(sum(p.rate * p.seconds for p in phases)) + 1
    plan = openloop.plan_for(
        args.url,
        rate=phases[0].rate,
        duration_s=phases[MEASURED].seconds,
        warmup_s=phases[WARMUP].seconds,
        connections=args.connections,
        drain_s=args.drain,
        tokens=openloop.read_tokens(args.tokens, 0, count) if args.tokens else None,
    )
    summary = uvloop.run(PhasedLoop(plan, phases, args.accepted).run())
    print(SUMMARY_PREFIX + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
