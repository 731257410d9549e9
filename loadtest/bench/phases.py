"""The HTTP sections of the benchmark, each a loop of repeats over ``Harness`` runs, the order of
the subjects rotated every repeat so drift does not always hit the same one.

- ``closed``: (a) sold-out path on the gateway, bare ASGI and nginx; (b) reserve path on the
  gateway and the naive gateway (wrk, closed loop).
- ``redis``: the reserve script on one Redis core, unpipelined and pipelined (redis-benchmark).
- ``open``: (a) and (b) at fixed offered rates, fractions of the gateway's closed-loop maximum.
- ``scaling``: the gateway with 1 and 2 worker processes, the capacity model's check points.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from loadtest.bench import redisbench
from loadtest.bench.context import Context, floats, option
from loadtest.bench.harness import GATEWAY_ENV
from loadtest.bench.results import Recorder, Step, rotate, runs_of
from loadtest.bench.sale import RESERVE_SHARDS, RESERVE_STOCK
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


def closed(ctx: Context, _: None, rec: Recorder) -> dict[str, Any]:
    h = ctx.harness()

    def steps(r: int) -> Iterator[Step]:
        for subject in rotate(SOLD_OUT_SUBJECTS, r):
            label = f"(a) sold-out  {subject:<9}"
            yield label, ("sold_out", subject, r), partial(h.closed_sold_out, subject)
        for subject in rotate(RESERVE_SUBJECTS, r):
            label = f"(b) reserve   {subject:<9}"
            yield label, ("reserve", subject, r), partial(h.closed_reserve, subject)

    rec.repeats("closed loop", ctx.args.repeats, steps, http_summary)
    return _http_settings(ctx)


def redis(ctx: Context, _: None, rec: Recorder) -> dict[str, Any]:
    h, o = ctx.harness(with_sale=False), ctx.opts
    port = redisbench.stack_primary([int(n.rsplit(":", 1)[1]) for n in h.cfg.redis_nodes])
    stack = redisbench.Node(f"cluster node :{port} (stack)", port, cluster=True)
    names: set[str] = set()

    def steps(r: int) -> Iterator[Step]:
        # A fresh standalone Redis per repeat, stopped once the repeat's steps are through.
        with h.standalone_redis() as standalone:
            for node in rotate([stack, standalone], r):
                names.add(node.name)
                for pipeline in rotate(PIPELINES, r):
                    label = f"(c) redis -P {pipeline:<2} {node.name}"
                    where = ("redis", f"{node.name}|{pipeline}", r)
                    yield label, where, partial(h.redis, node, pipeline)

    rec.repeats("redis", ctx.args.repeats, steps, redis_summary)
    return {
        "repeats": ctx.args.repeats,
        "redis_clients": o.redis_clients,
        "redis_calls": o.redis_calls,
        "redis_random_range": redisbench.RANDOM_RANGE,
        "redis_nodes": sorted(names),
        "load_core": o.load_core,
    }


def gateway_max(runs: Sequence[Mapping[str, Any]], scenario: str) -> float | None:
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


def scaling(ctx: Context, _: None, rec: Recorder) -> dict[str, Any]:
    h = ctx.harness()

    def steps(r: int) -> Iterator[Step]:
        for scenario, path in (("sold_out", "sold-out"), ("reserve", "reserve ")):
            measure = h.closed_sold_out if scenario == "sold_out" else h.closed_reserve
            for workers in rotate(SCALING_WORKERS, r):
                label, where = f"{path} gateway --workers {workers}", f"workers={workers}"
                yield label, (scenario, where, r), partial(measure, "gateway", workers)

    rec.repeats("scaling", ctx.args.repeats, steps, http_summary)
    return {**_http_settings(ctx), "workers": list(SCALING_WORKERS)}


@dataclass(frozen=True)
class OpenOptions:
    fractions: str = option("0.5,0.9", "of the gateway's closed-loop max")
    soldout_max: float = option(0.0, "req/s (0: the closed section's)")
    reserve_max: float = option(0.0, "req/s (0: the closed section's)")


def _http_settings(ctx: Context) -> dict[str, Any]:
    o = ctx.opts
    return {
        "duration_s": o.duration_s,
        "repeats": ctx.args.repeats,
        "warmup_s": o.warmup_s,
        "server_core": o.server_core,
        "load_core": o.load_core,
        "all_cores": o.all_cores,
        "soldout_connections": o.soldout_connections,
        "reserve_connections": o.reserve_connections,
        "reserve_stock": RESERVE_STOCK,
        "reserve_shards": RESERVE_SHARDS,
        "gateway_env": GATEWAY_ENV,
    }


def open_loop(ctx: Context, args: OpenOptions, rec: Recorder) -> dict[str, Any]:
    closed = runs_of(ctx.results, "closed")
    maxima: dict[str, float] = {}
    basis = []
    for scenario, given in (("sold_out", args.soldout_max), ("reserve", args.reserve_max)):
        found = given or gateway_max(closed, scenario)
        if found:
            maxima[scenario] = found
    if args.soldout_max or args.reserve_max:
        basis.append("maxima set on the command line")
    if closed:
        basis.append(f"closed section of {ctx.results['sections']['closed']['started_at']}")
    fractions = floats(args.fractions)
    rates = open_rates(maxima, fractions)
    if not rates:
        print("[open loop] skipped: no closed-loop maximum (run the closed section first)")
    h = ctx.harness()

    def steps(r: int) -> Iterator[Step]:
        for key, plan in rates.items():
            scenario = key.split("@", 1)[0]
            subjects = SOLD_OUT_SUBJECTS if scenario == "sold_out" else RESERVE_SUBJECTS
            offered = plan["offered_rps"]
            measure = h.open_sold_out if scenario == "sold_out" else h.open_reserve
            for subject in rotate(subjects, r):
                label = f"{scenario:<8} {subject:<9} at {offered:,.0f}/s ({plan['fraction']:.0%})"
                yield label, (key, subject, r), partial(measure, subject, offered)

    rec.repeats("open loop", ctx.args.repeats, steps, http_summary)
    return {
        **_http_settings(ctx),
        "open_connections": ctx.opts.open_connections,
        "open_warmup_s": ctx.opts.open_warmup_s,
        "fractions": fractions,
        "open_rates": rates,
        "max_basis": "; ".join(basis) or "none",
    }
