"""bench.md sections of the HTTP benchmarks: (a) sold-out and (b) reserve path in a closed loop,
both at fixed offered rates (open loop), (c) one Redis core, and 1 vs 2 gateway processes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadtest.bench.report.fmt import ms, pct, provenance, rate, ratio, spread, table
from loadtest.bench.stats import Run, figure, paired_ratio, select
from loadtest.capacity.plan import generator_short

Section = dict[str, Any]
LABELS = {
    "gateway": "gateway (`python -m gateway --workers 1`)",
    "bare_asgi": "bare ASGI on granian (`loadtest/baselines/bare_asgi.py`)",
    "nginx": "nginx `return 410` (`loadtest/baselines/nginx.conf`)",
    "naive": "naive gateway (`loadtest/baselines/naive_gateway.py`)",
}


def _vs(mine: Sequence[Run], base: Sequence[Run], metric: str, same: bool) -> str:
    return "1" if same else ratio(paired_ratio(mine, base, metric))


def not_sustained(m: dict[str, Any]) -> bool:
    answered = m.get("throughput_rps", m.get("achieved_rps"))
    return bool(m) and answered is not None and answered < 0.95 * m["offered_rps"]


def closed(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    bare = select(runs, "closed", "sold_out", "bare_asgi")
    nginx = select(runs, "closed", "sold_out", "nginx")
    rows = []
    for subject in ("gateway", "bare_asgi", "nginx"):
        mine = select(runs, "closed", "sold_out", subject)
        rows.append(
            [
                LABELS[subject],
                spread(figure(mine, "rps")),
                _vs(mine, bare, "rps", subject == "bare_asgi"),
                _vs(mine, nginx, "rps", subject == "nginx"),
                spread(figure(mine, "p99_ms"), ms),
                _vs(mine, bare, "p99_ms", subject == "bare_asgi"),
                spread(figure(mine, "cpu_us_per_req"), ms),
                spread(figure(mine, "server_busy"), pct),
            ]
        )
    naive = select(runs, "closed", "reserve", "naive")
    reserve_rows = []
    for subject in ("gateway", "naive"):
        mine = select(runs, "closed", "reserve", subject)
        reserve_rows.append(
            [
                LABELS[subject],
                spread(figure(mine, "rps")),
                _vs(mine, naive, "rps", subject == "naive"),
                spread(figure(mine, "p50_ms"), ms),
                spread(figure(mine, "p99_ms"), ms),
                _vs(mine, naive, "p99_ms", subject == "naive"),
                spread(figure(mine, "cpu_us_per_req"), ms),
                _vs(mine, naive, "cpu_us_per_req", subject == "naive"),
                spread(figure(mine, "server_busy"), pct),
            ]
        )
    return [
        "## (a) Sold-out path, closed loop"
        f" (wrk, 1 thread, {s['soldout_connections']} connections)",
        "",
        *provenance(sec),
        "An item with quantity 1, bought once, then flagged sold out by one more purchase; wrk",
        "POSTs to its purchase URL without a token, so the gateway answers 410 from its local",
        "flag. Baseline: the bare ASGI app.",
        "",
        *table(
            [
                "Server",
                "req/s",
                "req/s ÷ bare ASGI",
                "req/s ÷ nginx",
                "p99 ms",
                "p99 ÷ bare ASGI",
                "server CPU µs/req",
                "server core busy",
            ],
            rows,
        ),
        f"## (b) Reserve path, closed loop (wrk, 1 thread, {s['reserve_connections']} connections)",
        "",
        *provenance(sec),
        f"One item per server, {s['reserve_stock']:,} units on {s['reserve_shards']} shards;",
        "every request carries a different buyer's token (a fresh id range every run), so every",
        "request reserves a unit and is answered 202. Baseline: the naive gateway.",
        "",
        *table(
            [
                "Server",
                "req/s",
                "req/s ÷ naive",
                "p50 ms",
                "p99 ms",
                "p99 ÷ naive",
                "server CPU µs/req",
                "CPU ÷ naive",
                "server core busy",
            ],
            reserve_rows,
        ),
    ]


def open_loop(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    out = [
        "## Latency at a fixed offered rate (open loop)",
        "",
        *provenance(sec),
        "`loadtest/generators/openloop.py`: requests are due at a fixed rate whatever the server",
        "does; each latency is measured from the request's intended send time (no coordinated",
        "omission).",
        f"{s['open_connections']} keep-alive connections, {s['open_warmup_s']:g} s unrecorded",
        "warm-up. Offered rates are fractions of the gateway's median closed-loop req/s"
        f" ({s['max_basis']}); the baselines are offered the same rate. The generator is Python"
        " on one core; *generator lag* is how late it dispatched requests past their due time (its"
        " event loop busy with answers). A row marked ⚠ had a generator lag p99 ≥ 1 ms: the"
        " generator's own delay is part of its latencies, which overstate the server's. *Answered"
        " req/s* counts every answer over the whole run (warm-up and drain included); a row marked"
        " ↓ answered less than 95% of the offered rate in some run: the offered rate was not"
        " sustained (the server, or the generator if also ⚠, could not keep up).",
        "",
    ]
    for key, plan in s["open_rates"].items():
        scenario = key.split("@", 1)[0]
        baseline = "bare_asgi" if scenario == "sold_out" else "naive"
        subjects = (
            ("gateway", "bare_asgi", "nginx") if scenario == "sold_out" else ("gateway", "naive")
        )
        base = select(runs, "open", key, baseline)
        rows = []
        for subject in subjects:
            mine = select(runs, "open", key, subject)
            marks = ""
            if any(generator_short(r["metrics"]) for r in mine):
                marks += " ⚠"
            if any(not_sustained(r["metrics"]) for r in mine):
                marks += " ↓"
            rows.append(
                [
                    LABELS[subject] + marks,
                    spread(figure(mine, "throughput_rps") or figure(mine, "achieved_rps")),
                    spread(figure(mine, "p50_ms"), ms),
                    spread(figure(mine, "p99_ms"), ms),
                    spread(figure(mine, "p999_ms"), ms),
                    spread(figure(mine, "max_ms"), ms),
                    _vs(mine, base, "p99_ms", subject == baseline),
                    spread(figure(mine, "server_busy"), pct),
                    spread(figure(mine, "dispatch_lag_p99_ms"), ms),
                ]
            )
        title = "Sold-out path" if scenario == "sold_out" else "Reserve path"
        out += [
            f"### {title} at {rate(plan['offered_rps'])} req/s offered"
            f" ({plan['fraction']:.0%} of {rate(plan['max_rps'])} req/s)",
            "",
            *table(
                [
                    "Server",
                    "answered req/s",
                    "p50 ms",
                    "p99 ms",
                    "p99.9 ms",
                    "max ms",
                    f"p99 ÷ {baseline.replace('_', ' ')}",
                    "server core busy",
                    "generator lag p99 ms",
                ],
                rows,
            ),
        ]
    return out


def redis(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    rows = []
    for node in s["redis_nodes"]:
        p1 = select(runs, "redis", "redis", f"{node}|1")
        for pipeline in (1, 16):
            mine = select(runs, "redis", "redis", f"{node}|{pipeline}")
            rows.append(
                [
                    node,
                    f"-P {pipeline}",
                    spread(figure(mine, "ops_per_s")),
                    _vs(mine, p1, "ops_per_s", pipeline == 1),
                    spread(figure(mine, "p99_ms"), ms),
                ]
            )
    calls = ", ".join(f"-P {p}: {n:,}" for p, n in s["redis_calls"].items())
    return [
        "## (c) Redis, one core: the reserve script",
        "",
        *provenance(sec),
        f"`redis-benchmark -c {s['redis_clients']} -r {s['redis_random_range']} EVALSHA <reserve>"
        " 4 <stock> <buyers> <orders> <outbox> __rand_int__ order-__rand_int__ <event>`: every",
        f"call a new buyer, so every call reserves (DECR + 3 HSET). Calls per run: {calls}.",
        "Baseline: the same node unpipelined (-P 1).",
        "",
        *table(["Node", "Pipelining", "EVALSHA/s", "÷ -P 1", "p99 ms"], rows),
    ]


def scaling(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs = sec["runs"]
    rows = []
    for scenario, title in (("sold_out", "sold-out"), ("reserve", "reserve")):
        one = select(runs, "scaling", scenario, "workers=1")
        for workers in (1, 2):
            mine = select(runs, "scaling", scenario, f"workers={workers}")
            rows.append(
                [
                    title,
                    f"{workers}",
                    spread(figure(mine, "rps")),
                    _vs(mine, one, "rps", workers == 1),
                    spread(figure(mine, "p99_ms"), ms),
                    spread(figure(mine, "cpu_us_per_req"), ms),
                    spread(figure(mine, "loadgen_cpu_us_per_req"), ms),
                    spread(figure(mine, "machine_cpu_us_per_req"), ms),
                    spread(figure(mine, "machine_busy_cores"), lambda v: f"{v:.2f}"),
                ]
            )
    s = sec["settings"]
    return [
        "## Gateway processes: 1 vs 2 (closed loop)",
        "",
        *provenance(sec),
        f"`python -m gateway --workers N`. One worker: server on core {s['server_core']}, wrk"
        f" (1 thread) on core {s['load_core']}. Two workers: the server and wrk (2 threads) both"
        f" on cores {s['all_cores']}: on a 2-core machine the load generator competes with the"
        " server, so 2 workers cannot double the rate here; the capacity model predicts what"
        " they should do (see *Capacity model*). Baseline: 1 worker. *machine CPU µs/req* is"
        " every core's busy time (server, wrk, Redis, Kafka, anything else) per request.",
        "",
        *table(
            [
                "Path",
                "workers",
                "req/s",
                "÷ 1 worker",
                "p99 ms",
                "server CPU µs/req",
                "wrk CPU µs/req",
                "machine CPU µs/req",
                "cores busy",
            ],
            rows,
        ),
    ]
