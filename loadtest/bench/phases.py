"""The HTTP sections of the benchmark, each a loop of repeats over ``Harness`` runs, the order of
the subjects rotated every repeat so drift does not always hit the same one.

- ``closed``: (a) sold-out path on the gateway, bare ASGI and nginx; (b) reserve path on the
  gateway and the naive gateway (wrk, closed loop).
- ``redis``: the reserve script on one Redis core, unpipelined and pipelined (redis-benchmark).
- ``open``: (a) and (b) at fixed offered rates, fractions of the gateway's closed-loop maximum.
- ``scaling``: the gateway with 1 and 2 worker processes, the capacity model's check points.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from loadtest.bench import redisbench
from loadtest.bench.harness import Harness
from loadtest.bench.results import Recorder, rotate
from loadtest.bench.stats import figure, select

SOLD_OUT_SUBJECTS = ("gateway", "bare_asgi", "nginx")
RESERVE_SUBJECTS = ("gateway", "naive")
PIPELINES = (1, 16)
SCALING_WORKERS = (1, 2)


def http_summary(m: dict[str, Any]) -> str:
    rps = m.get("rps", m.get("achieved_rps", 0.0))
    text = f"{rps:,.0f} req/s, p99 {m['p99_ms']:.2f} ms"
    if "offered_rps" in m:
        text = f"offered {m['offered_rps']:,.0f}/s, achieved " + text
    if "cpu_us_per_req" in m:
        text += f", server {m['cpu_us_per_req']:.0f} CPU µs/req, {m['server_busy']:.0%} busy"
    return text


def redis_summary(m: dict[str, Any]) -> str:
    return f"{m['ops_per_s']:,.0f} EVALSHA/s, p99 {m['p99_ms']:.2f} ms"


def closed(h: Harness, rec: Recorder, repeats: int) -> None:
    for r in range(repeats):
        print(f"[closed loop] repeat {r + 1}/{repeats}", flush=True)
        for subject in rotate(SOLD_OUT_SUBJECTS, r):
            rec.step(
                f"(a) sold-out  {subject:<9}",
                ("sold_out", subject, r),
                partial(h.closed_sold_out, subject),
                http_summary,
            )
        for subject in rotate(RESERVE_SUBJECTS, r):
            rec.step(
                f"(b) reserve   {subject:<9}",
                ("reserve", subject, r),
                partial(h.closed_reserve, subject),
                http_summary,
            )


def redis(h: Harness, rec: Recorder, repeats: int) -> list[str]:
    """Returns the names of the nodes measured."""
    port = redisbench.stack_primary([int(n.rsplit(":", 1)[1]) for n in h.cfg.redis_nodes])
    stack = redisbench.Node(f"cluster node :{port} (stack)", port, cluster=True)
    names: set[str] = set()
    for r in range(repeats):
        print(f"[redis] repeat {r + 1}/{repeats}", flush=True)
        with h.standalone_redis() as standalone:
            for node in rotate([stack, standalone], r):
                names.add(node.name)
                for pipeline in rotate(PIPELINES, r):
                    rec.step(
                        f"(c) redis -P {pipeline:<2} {node.name}",
                        ("redis", f"{node.name}|{pipeline}", r),
                        partial(h.redis, node, pipeline),
                        redis_summary,
                    )
    return sorted(names)


def gateway_max(runs: Sequence[dict[str, Any]], scenario: str) -> float | None:
    """The gateway's median closed-loop req/s in ``runs`` (the closed section's)."""
    found = figure(select(runs, "closed", scenario, "gateway"), "rps")
    return found.median if found else None


def round2(value: float) -> float:
    """Two significant digits: 3342 -> 3300."""
    if value < 10:
        return max(1.0, round(value))
    digits = len(str(int(value))) - 2
    return float(round(value, -digits))


def open_rates(maxima: dict[str, float], fractions: Sequence[float]) -> dict[str, dict[str, float]]:
    """``{"sold_out@0.5": {"fraction": 0.5, "max_rps": ..., "offered_rps": ...}, ...}``."""
    return {
        f"{scenario}@{fraction:g}": {
            "fraction": fraction,
            "max_rps": top,
            "offered_rps": round2(top * fraction),
        }
        for scenario, top in maxima.items()
        for fraction in fractions
    }


def open_loop(h: Harness, rec: Recorder, repeats: int, rates: dict[str, dict[str, float]]) -> None:
    for r in range(repeats):
        print(f"[open loop] repeat {r + 1}/{repeats}", flush=True)
        for key, plan in rates.items():
            scenario = key.split("@", 1)[0]
            subjects = SOLD_OUT_SUBJECTS if scenario == "sold_out" else RESERVE_SUBJECTS
            offered = plan["offered_rps"]
            measure = h.open_sold_out if scenario == "sold_out" else h.open_reserve
            for subject in rotate(subjects, r):
                rec.step(
                    f"{scenario:<8} {subject:<9} at {offered:,.0f}/s ({plan['fraction']:.0%})",
                    (key, subject, r),
                    partial(measure, subject, offered),
                    http_summary,
                )


def scaling(h: Harness, rec: Recorder, repeats: int) -> None:
    for r in range(repeats):
        print(f"[scaling] repeat {r + 1}/{repeats}", flush=True)
        for workers in rotate(SCALING_WORKERS, r):
            rec.step(
                f"sold-out gateway --workers {workers}",
                ("sold_out", f"workers={workers}", r),
                partial(h.closed_sold_out, "gateway", workers),
                http_summary,
            )
        for workers in rotate(SCALING_WORKERS, r):
            rec.step(
                f"reserve  gateway --workers {workers}",
                ("reserve", f"workers={workers}", r),
                partial(h.closed_reserve, "gateway", workers),
                http_summary,
            )
