"""The overload benchmark's phases (loadtest/generators/phased.py) offered by vegeta instead of the
project's Python generator: a Go client offers several times the rate on the same core, so the
5× and 10× rows reach the server.

Each phase is one vegeta attack at its constant rate, started at the phase's scheduled time
while the earlier phase's answers are still coming in (open loop across phases too: a backlog
never delays the next phase). The result has phased.py's keys, computed the same way: latency
from each request's due time, goodput as accepted answers completed while the overload lasted,
the after phase in 100 ms windows for the recovery.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from loadtest.generators import vegeta
from loadtest.generators.phased import AFTER, MEASURED, REFUSALS, WINDOW_S, Phase
from loadtest.measure.latency import Latencies

MS = 1e6  # ns


def measure(
    binary: str,
    url: str,
    phases: Sequence[Phase],
    *,
    accepted: int,
    connections: int,
    core: int | str,
    tokens: Path | None,
    workdir: Path,
) -> dict[str, Any]:
    """Run the phases back to back (one vegeta process each, pinned to ``core``); a summary
    with phased.py's keys. ``tokens``: one buyer token per line, one per request in order."""
    phases = [Phase(float(round(p.rate)), p.seconds) for p in phases]  # what vegeta offers
    lines: Iterator[bytes] | None = None
    if tokens is not None:
        lines = iter(tokens.read_bytes().split(b"\n"))
    files: list[Path | None] = []
    for i, phase in enumerate(phases):
        if lines is None:
            files.append(None)
            continue
        count = int(phase.rate * phase.seconds) + 1
        files.append(
            vegeta.targets(workdir / f"phase-{i}.http", url, itertools.islice(lines, count))
        )
    running = []
    due = time.monotonic() + 0.2
    for i, (phase, target) in enumerate(zip(phases, files, strict=True)):
        time.sleep(max(0.0, due - time.monotonic()))
        results = workdir / f"phase-{i}.bin"
        proc = vegeta.start(
            binary, url, rate=phase.rate, seconds=phase.seconds, core=core,
            connections=connections, results=results, target_file=target,
        )  # fmt: skip
        running.append((proc, results))
        due += phase.seconds
    timeout = sum(p.seconds for p in phases) + 120
    hits = [vegeta.finish(binary, proc, results, timeout) for proc, results in running]
    for target in files:
        if target is not None:
            target.unlink()
    return report(phases, hits, accepted)


def report(
    phases: Sequence[Phase], hits: Sequence[list[vegeta.Hit]], accepted: int
) -> dict[str, Any]:
    """phased.py's summary from each phase's hits."""
    starts = [vegeta.start_ns(h, p.rate) for h, p in zip(hits, phases, strict=True)]
    measured = phases[MEASURED]
    m_start = starts[MEASURED]
    m_end = m_start + measured.seconds * 1e9
    goodput = sum(
        1
        for phase_hits in hits
        for h in phase_hits
        if h.code == accepted and m_start <= h.sent_ns + h.latency_ns < m_end
    )
    counts = {"ok": 0, "refused": 0, "other": 0}
    statuses: Counter[int] = Counter()
    latency = {"ok": Latencies(), "refused": Latencies(), "all": Latencies()}
    lag = Latencies()
    unanswered = 0
    for h in hits[MEASURED]:
        intended = m_start + h.seq * 1e9 / measured.rate
        statuses[h.code] += 1
        lag.add_ms((h.sent_ns - intended) / MS)
        if h.code == 0:
            unanswered += 1
            continue
        kind = "ok" if h.code == accepted else "refused" if h.code in REFUSALS else "other"
        counts[kind] += 1
        took = (h.sent_ns + h.latency_ns - intended) / MS
        latency["all"].add_ms(took)
        if kind != "other":
            latency[kind].add_ms(took)
    return {
        "offered_rps": measured.rate,
        "seconds": measured.seconds,
        "goodput_rps": goodput / measured.seconds,
        "refused_rps": counts["refused"] / measured.seconds,
        "counts": counts,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "ok_p50_ms": latency["ok"].ms(50),
        "ok_p99_ms": latency["ok"].ms(99),
        "refused_p50_ms": latency["refused"].ms(50),
        "refused_p99_ms": latency["refused"].ms(99),
        "all_p99_ms": latency["all"].ms(99),
        "dispatch_lag_p99_ms": lag.ms(99),
        "sent_rps": len(hits[MEASURED]) / measured.seconds,
        "unanswered": unanswered,
        "after_windows": _after_windows(phases, hits, starts, accepted),
    }


def _after_windows(
    phases: Sequence[Phase], hits: Sequence[list[vegeta.Hit]], starts: list[float], accepted: int
) -> list[list[int]]:
    """The after phase's 100 ms windows of due time: [answers, bad answers, max latency µs]."""
    if len(phases) <= AFTER:
        return []
    after, a_start = phases[AFTER], starts[AFTER]
    windows = [[0, 0, 0] for _ in range(int(after.seconds / WINDOW_S))]
    for h in hits[AFTER]:
        intended = a_start + h.seq * 1e9 / after.rate
        index = int(h.seq / after.rate / WINDOW_S + 1e-9)  # from seq: no float drift
        if not 0 <= index < len(windows):
            continue
        window = windows[index]
        window[0] += 1
        window[1] += h.code != accepted
        window[2] = max(window[2], int((h.sent_ns + h.latency_ns - intended) / 1e3))
    return windows
