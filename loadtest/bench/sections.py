"""The sections of ``python -m loadtest.bench``, one registry: each a name, the title of its part
of bench.md, its typed options (a dataclass whose fields are its command-line flags,
``--<section>-<field>``), the tools it needs, how it measures (into a ``Recorder``, returning the
settings it ran with) and how its part of bench.md is rendered from the committed results.

Every section shares the harness's options (``--duration``, ``--repeats``, the connections,
the cores); ``--quick`` shrinks both those and, per section, its own (``Spec.quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from loadtest.bench import (
    balancer,
    failover,
    fullspike,
    loadgen,
    overload,
    phases,
    redisbench,
    reserve_speed,
    room,
    starvation,
    techniques,
    voucher_load,
    wait_cost,
    writer_load,
)
from loadtest.bench import results as store
from loadtest.bench.context import Context, floats, option
from loadtest.bench.harness import GATEWAY_ENV
from loadtest.bench.report import http as report_http
from loadtest.bench.report import pipeline as report_pipeline
from loadtest.bench.report import techniques as report_techniques
from loadtest.bench.sale import RESERVE_SHARDS, RESERVE_STOCK
from loadtest.constants import BENCH_PORTS
from loadtest.generators import tokens
from rig.ports import free_port

Got = Mapping[str, store.Section]


@dataclass(frozen=True)
class Spec:
    name: str
    title: str
    measure: Callable[[Context, Any, store.Recorder], dict[str, Any]]
    render: Callable[[Got], list[str]]
    tools: tuple[str, ...] = ()
    options: type | None = None  # a dataclass with a default for every field
    compares: bool = False  # measures every ``--compare`` tree beside the current code
    quick: Mapping[str, Any] = field(default_factory=dict)  # its options under --quick


def add_flags(p: argparse.ArgumentParser, spec: Spec) -> None:
    """``--<section>-<field>`` for every field of the section's options."""
    if spec.options is None:
        return
    group = p.add_argument_group(f"section {spec.name}")
    for f in dataclasses.fields(spec.options):
        flag = f"--{spec.name}-{f.name}".replace("_", "-")
        dest = f"{spec.name}__{f.name}"
        helps = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            group.add_argument(
                flag, dest=dest, action=argparse.BooleanOptionalAction, default=f.default,
                help=helps,
            )  # fmt: skip
        else:
            kind = type(f.default)
            group.add_argument(
                flag, dest=dest, type=kind, default=f.default, help=helps, metavar=kind.__name__
            )


def options_of(args: argparse.Namespace, spec: Spec) -> Any:
    """The section's options from the parsed command line (None: it has none of its own)."""
    if spec.options is None:
        return None
    names = (f.name for f in dataclasses.fields(spec.options))
    given = {n: getattr(args, f"{spec.name}__{n}") for n in names}
    return spec.options(**{**given, **(spec.quick if args.quick else {})})


@dataclass(frozen=True)
class OpenOptions:
    fractions: str = option("0.5,0.9", "of the gateway's closed-loop max")
    soldout_max: float = option(0.0, "req/s (0: the closed section's)")
    reserve_max: float = option(0.0, "req/s (0: the closed section's)")


@dataclass(frozen=True)
class SpikeOptions:
    units: int = option(10_000, "stock of the spike's item")
    buyers: int = option(200_000, "distinct buyers, each once")
    shards: int = option(8, "shards of the item")
    connections: int = option(256, "wrk connections")


@dataclass(frozen=True)
class WriterOptions:
    orders: int = option(20_000, "orders per writer run")
    orders_at_1: int = option(2_000, "orders at batch 1 (it drains slowly)")


@dataclass(frozen=True)
class TechniquesOptions:
    clients: str = option("1,8,64", "concurrent clients, levels")
    attempts: int = option(techniques.ATTEMPTS, "attempts per trial")
    units: int = option(techniques.UNITS, "stock of the contended item")


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


def run_closed(ctx: Context, _: None, rec: store.Recorder) -> dict[str, Any]:
    phases.closed(ctx.harness(), rec, ctx.args.repeats)
    return _http_settings(ctx)


def run_redis(ctx: Context, _: None, rec: store.Recorder) -> dict[str, Any]:
    nodes = phases.redis(ctx.harness(with_sale=False), rec, ctx.args.repeats)
    o = ctx.opts
    return {
        "repeats": ctx.args.repeats,
        "redis_clients": o.redis_clients,
        "redis_calls": o.redis_calls,
        "redis_random_range": redisbench.RANDOM_RANGE,
        "redis_nodes": nodes,
        "load_core": o.load_core,
    }


def run_open(ctx: Context, args: OpenOptions, rec: store.Recorder) -> dict[str, Any]:
    closed = store.runs_of(ctx.results, "closed")
    maxima: dict[str, float] = {}
    basis = []
    for scenario, given in (("sold_out", args.soldout_max), ("reserve", args.reserve_max)):
        found = given or phases.gateway_max(closed, scenario)
        if found:
            maxima[scenario] = found
    if args.soldout_max or args.reserve_max:
        basis.append("maxima set on the command line")
    if closed:
        basis.append(f"closed section of {ctx.results['sections']['closed']['started_at']}")
    fractions = floats(args.fractions)
    rates = phases.open_rates(maxima, fractions)
    if not rates:
        print("[open loop] skipped: no closed-loop maximum (run the closed section first)")
    phases.open_loop(ctx.harness(), rec, ctx.args.repeats, rates)
    return {
        **_http_settings(ctx),
        "open_connections": ctx.opts.open_connections,
        "open_warmup_s": ctx.opts.open_warmup_s,
        "fractions": fractions,
        "open_rates": rates,
        "max_basis": "; ".join(basis) or "none",
    }


def run_scaling(ctx: Context, _: None, rec: store.Recorder) -> dict[str, Any]:
    phases.scaling(ctx.harness(), rec, ctx.args.repeats)
    return {**_http_settings(ctx), "workers": list(phases.SCALING_WORKERS)}


def run_spike(ctx: Context, a: SpikeOptions, rec: store.Recorder) -> dict[str, Any]:
    o, repeats = ctx.opts, ctx.args.repeats
    plan = fullspike.Plan(
        units=a.units,
        shards=a.shards,
        buyers=a.buyers,
        connections=a.connections,
        server_core=o.server_core,
        load_core=o.load_core,
        writer_cores=o.all_cores,
        timeout_s=max(120.0, a.buyers / 500),
    )
    buyers = tokens.BuyerIds()
    for r in range(repeats):
        print(f"[spike] repeat {r + 1}/{repeats}", flush=True)
        rec.step(
            f"{plan.buyers:,} buyers for {plan.units:,} units",
            ("spike", "gateway", r),
            partial(fullspike.run_once, ctx.cfg, plan, ctx.workdir, ctx.log_dir, buyers),
            _spike_summary,
        )
    return {**fullspike.settings(plan), "repeats": repeats}


def _spike_summary(m: dict[str, Any]) -> str:
    last = m.get("first_purchase_to_last_commit_s")
    drained = f"{last:.2f} s first purchase → last commit" if last else "writer did not drain"
    sellout = m["sellout_s"] or 0.0
    return (
        f"{m['rps']:,.0f} req/s, p99 {m['p99_ms']:.1f} ms, sold out in {sellout:.2f} s, {drained}"
    )


def run_writer(ctx: Context, a: WriterOptions, rec: store.Recorder) -> dict[str, Any]:
    about = writer_load.section(rec, ctx.args.repeats, a.orders, a.orders_at_1)
    return {**about, "repeats": ctx.args.repeats}


def run_techniques(ctx: Context, a: TechniquesOptions, rec: store.Recorder) -> dict[str, Any]:
    clients = [int(c) for c in a.clients.split(",") if c]
    core, repeats = ctx.opts.load_core, ctx.args.repeats
    about = techniques.run(rec, repeats, clients, a.attempts, a.units, core)
    return {**about, "repeats": repeats}


def run_vouchers(ctx: Context, _: None, rec: store.Recorder) -> dict[str, Any]:
    return {**voucher_load.section(rec, ctx.args.repeats), "repeats": ctx.args.repeats}


def run_loadgen(ctx: Context, _: None, rec: store.Recorder) -> dict[str, Any]:
    o = ctx.opts
    port = free_port(set(), BENCH_PORTS)
    cores = (o.server_core, o.load_core)
    about = loadgen.run(rec, ctx.args.repeats, o.duration_s, port, cores, ctx.workdir, ctx.log_dir)
    return {**about, "repeats": ctx.args.repeats}


def _part(render: Callable[[store.Section], list[str]], name: str) -> Callable[[Got], list[str]]:
    return lambda got: render(got[name])


SECTIONS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "closed", "(a) sold-out and (b) reserve path, closed loop", run_closed,
            _part(report_http.closed, "closed"), ("wrk", "taskset", "nginx"),
        ),
        Spec(
            "open", "latency at fixed offered rates", run_open,
            _part(report_http.open_loop, "open"), ("taskset", "nginx"), OpenOptions,
        ),
        Spec(
            "redis", "(c) Redis, one core", run_redis, _part(report_http.redis, "redis"),
            ("taskset", "redis-benchmark", "redis-server"),
        ),
        Spec(
            "scaling", "1 vs 2 gateway processes", run_scaling,
            _part(report_http.scaling, "scaling"), ("wrk", "taskset"),
        ),
        Spec(
            "writer", "writer", run_writer, _part(report_pipeline.writer, "writer"), (),
            WriterOptions, quick={"orders": 5_000, "orders_at_1": 500},
        ),
        Spec(
            "spike", "full spike", run_spike,
            lambda got: report_pipeline.spike(got["spike"], got.get("closed")),
            ("wrk", "taskset"), SpikeOptions, quick={"units": 2_000, "buyers": 40_000},
        ),
        Spec(
            "techniques", "anti-oversell techniques", run_techniques,
            _part(report_techniques.techniques, "techniques"), ("taskset",), TechniquesOptions,
            quick={"attempts": 2_000},
        ),
        Spec("vouchers", "vouchers", run_vouchers, _part(report_pipeline.vouchers, "vouchers")),
        Spec(
            "loadgen", "load generators", run_loadgen,
            lambda got: report_pipeline.loadgen(got["loadgen"], got.get("closed")),
            ("taskset", "nginx"),
        ),
        Spec(
            "balancer", "The balancer answering sold out", balancer.measure,
            _part(balancer.render, "balancer"), ("wrk", "taskset", "nginx", "haproxy"),
            balancer.BalancerOptions,
        ),
        Spec(
            "reserve_speed", "The reserve path, code trees side by side", reserve_speed.measure,
            _part(reserve_speed.render, "reserve_speed"), ("wrk", "taskset", "nginx"),
            reserve_speed.SpeedOptions, compares=True,
        ),
        Spec(
            "overload", "Overload: 2×, 5×, 10× one gateway's maximum", overload.measure,
            _part(overload.render, "overload"), ("wrk", "taskset", "nginx", "haproxy"),
            overload.OverloadOptions,
        ),
        Spec(
            "failover", "Redis Cluster failover against its settings", failover.run,
            _part(failover.render, "failover"), ("redis-server",), failover.FailoverOptions,
        ),
        Spec(
            "room", "The waiting room: joins and polls beside the sold-out path", room.measure,
            _part(room.render, "room"), ("wrk", "taskset"), room.RoomOptions,
        ),
        Spec(
            "starvation", "Connection starvation: the same load with and without an attack",
            starvation.measure, _part(starvation.render, "starvation"), ("taskset", "haproxy"),
            starvation.StarvationOptions,
        ),
        Spec(
            "wait_cost", "Cost of waiting for the replica (WAIT) on the reserve path",
            wait_cost.measure, _part(wait_cost.render, "wait_cost"), (), wait_cost.WaitOptions,
        ),
    )
}  # fmt: skip
