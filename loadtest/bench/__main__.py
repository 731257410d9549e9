"""``python -m loadtest.bench``: measure the purchase path and the pipeline behind it side by side
with their baselines, and rewrite ``bench.md`` (raw: ``loadtest/reports/sections/<section>.json``,
one committed file a section; ``--render`` rewrites bench.md from them without measuring).

Sections (``--only`` runs a subset; the others keep their latest results):
closed (sold-out / reserve path vs baselines, wrk), redis (redis-benchmark), open (latency at
fixed fractions of the gateway's maximum), scaling (1 vs 2 gateway processes), spike (a whole
sale, first purchase to last order committed), writer (batch 1 / 100 / 1,000), techniques
(anti-oversell techniques on one contended item), vouchers (flash vs ordinary), loadgen (one
Locust worker's and the open-loop generator's ceiling). ``python -m loadtest.capacity.plan``
sizes a fleet from the results.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from kernel.settings import Settings, settings
from loadtest.bench import (
    fullspike,
    loadgen,
    machine,
    phases,
    redisbench,
    report,
    techniques,
    voucherbench,
    writerbench,
)
from loadtest.bench import results as store
from loadtest.bench.harness import GATEWAY_ENV, Harness, Options
from loadtest.bench.sale import RESERVE_SHARDS, RESERVE_STOCK
from loadtest.constants import BENCH_PORTS, REPORTS_DIR
from loadtest.generators import tokens
from rig.ports import free_port

SECTIONS = (
    "closed",
    "redis",
    "open",
    "scaling",
    "spike",
    "writer",
    "techniques",
    "vouchers",
    "loadgen",
)
TOOLS = {
    "closed": ("wrk", "taskset", "nginx"),
    "redis": ("taskset", "redis-benchmark", "redis-server"),
    "open": ("taskset", "nginx"),
    "scaling": ("wrk", "taskset"),
    "spike": ("wrk", "taskset"),
    "techniques": ("taskset",),
    "loadgen": ("taskset", "nginx"),
}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", help=f"sections, comma separated: {','.join(SECTIONS)}")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="repeats of every run (default 3)")
    p.add_argument(
        "--quick", action="store_true", help="a smoke run: 3 s runs, 1 repeat, smaller sale"
    )
    p.add_argument("--soldout-connections", type=int, default=64)
    # 256: at 128 the gateway's core was 91-94% busy (its requests waited on Redis and Kafka
    # across the other core), so the rate measured round trips, not capacity; the naive
    # gateway is saturated at either.
    p.add_argument("--reserve-connections", type=int, default=256)
    p.add_argument("--open-connections", type=int, default=256)
    p.add_argument("--open-fractions", default="0.5,0.9", help="of the gateway's closed-loop max")
    p.add_argument("--soldout-max", type=float, help="req/s to take the fractions of (sold-out)")
    p.add_argument("--reserve-max", type=float, help="req/s to take the fractions of (reserve)")
    p.add_argument("--spike-units", type=int, default=10_000)
    p.add_argument("--spike-buyers", type=int, default=200_000)
    p.add_argument("--spike-shards", type=int, default=8)
    p.add_argument("--spike-connections", type=int, default=256)
    p.add_argument("--writer-orders", type=int, default=20_000)
    p.add_argument("--writer-orders-at-1", type=int, default=2_000)
    p.add_argument("--technique-clients", default="1,8,64")
    p.add_argument("--technique-attempts", type=int, default=techniques.ATTEMPTS)
    p.add_argument("--technique-units", type=int, default=techniques.UNITS)
    p.add_argument("--output", type=Path, default=report.BENCH_MD, help="the report to rewrite")
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite the report from the committed section files",
    )
    p.add_argument("--results", type=Path, default=store.SECTIONS_DIR, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.repeats = 3.0, 1
        args.spike_units, args.spike_buyers = 2_000, 40_000
        args.writer_orders, args.writer_orders_at_1 = 5_000, 500
        args.technique_attempts = 2_000
    args.sections = [s for s in (args.only or ",".join(SECTIONS)).split(",") if s]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    args.fractions = [float(f) for f in args.open_fractions.split(",") if f]
    args.clients = [int(c) for c in args.technique_clients.split(",") if c]
    return args


def options(args: argparse.Namespace) -> Options:
    return Options(
        duration_s=args.duration,
        warmup_s=1.0 if args.quick else 2.0,
        soldout_connections=args.soldout_connections,
        reserve_connections=args.reserve_connections,
        open_connections=args.open_connections,
        open_warmup_s=1.0,
        redis_clients=50,
        redis_calls={1: int(10_000 * args.duration), 16: int(40_000 * args.duration)},
    )


def preflight(sections: Sequence[str]) -> None:
    wanted = {t for s in sections for t in TOOLS.get(s, ())}
    missing = sorted(
        t for t in wanted if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()
    )
    if missing:
        raise SystemExit(
            f"missing tools: {', '.join(missing)} (install them with `scripts/bootstrap --bench`,"
            " which `make bench` runs)"
        )
    if machine.describe()["nproc"] < 2:
        raise SystemExit("needs 2 cores: the server on core 0, the load generator on core 1")


@dataclass
class Context:
    args: argparse.Namespace
    cfg: Settings
    opts: Options
    workdir: Path
    log_dir: Path
    results: store.Results
    _harness: Harness | None = field(default=None)

    def harness(self, with_sale: bool = True) -> Harness:
        """The HTTP sections' harness, made on first use, and its sale, made on first need (a
        failed set-up raises, and is tried again by the next section that needs it)."""
        if self._harness is None:
            self._harness = Harness(self.cfg, self.opts, self.workdir, self.log_dir)
        h = self._harness
        if with_sale and h.bench_sale is None:
            print(f"set-up: sale through a gateway on :{h.ports['gateway']}", flush=True)
            made = h.set_up_sale()
            print(f"  sale {made.sale_id}, items {[i.item_id for i in made.items]}", flush=True)
        return h

    def close(self) -> None:
        if self._harness is not None:
            self._harness.close()


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


def run_closed(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    phases.closed(ctx.harness(), rec, ctx.args.repeats)
    return _http_settings(ctx)


def run_redis(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
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


def run_open(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    args = ctx.args
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
    rates = phases.open_rates(maxima, args.fractions)
    if not rates:
        print("[open loop] skipped: no closed-loop maximum (run the closed section first)")
    phases.open_loop(ctx.harness(), rec, args.repeats, rates)
    return {
        **_http_settings(ctx),
        "open_connections": ctx.opts.open_connections,
        "open_warmup_s": ctx.opts.open_warmup_s,
        "fractions": args.fractions,
        "open_rates": rates,
        "max_basis": "; ".join(basis) or "none",
    }


def run_scaling(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    phases.scaling(ctx.harness(), rec, ctx.args.repeats)
    return {**_http_settings(ctx), "workers": list(phases.SCALING_WORKERS)}


def run_spike(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    a, o = ctx.args, ctx.opts
    plan = fullspike.Plan(
        units=a.spike_units,
        shards=a.spike_shards,
        buyers=a.spike_buyers,
        connections=a.spike_connections,
        server_core=o.server_core,
        load_core=o.load_core,
        writer_cores=o.all_cores,
        timeout_s=max(120.0, a.spike_buyers / 500),
    )
    buyers = tokens.BuyerIds()
    for r in range(a.repeats):
        print(f"[spike] repeat {r + 1}/{a.repeats}", flush=True)
        rec.step(
            f"{plan.buyers:,} buyers for {plan.units:,} units",
            ("spike", "gateway", r),
            partial(fullspike.run_once, ctx.cfg, plan, ctx.workdir, ctx.log_dir, buyers),
            _spike_summary,
        )
    return {**fullspike.settings(plan), "repeats": a.repeats}


def _spike_summary(m: dict[str, Any]) -> str:
    last = m.get("first_purchase_to_last_commit_s")
    drained = f"{last:.2f} s first purchase → last commit" if last else "writer did not drain"
    sellout = m["sellout_s"] or 0.0
    return (
        f"{m['rps']:,.0f} req/s, p99 {m['p99_ms']:.1f} ms, sold out in {sellout:.2f} s, {drained}"
    )


def run_writer(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    a = ctx.args
    about = writerbench.run(rec, a.repeats, a.writer_orders, a.writer_orders_at_1)
    return {**about, "repeats": a.repeats}


def run_techniques(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    a = ctx.args
    about = techniques.run(
        rec, a.repeats, a.clients, a.technique_attempts, a.technique_units, ctx.opts.load_core
    )
    return {**about, "repeats": a.repeats}


def run_vouchers(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    return {**voucherbench.run(rec, ctx.args.repeats), "repeats": ctx.args.repeats}


def run_loadgen(ctx: Context, rec: store.Recorder) -> dict[str, Any]:
    o = ctx.opts
    port = free_port(set(), BENCH_PORTS)
    cores = (o.server_core, o.load_core)
    about = loadgen.run(rec, ctx.args.repeats, o.duration_s, port, cores, ctx.workdir, ctx.log_dir)
    return {**about, "repeats": ctx.args.repeats}


RUNNERS: dict[str, Callable[[Context, store.Recorder], dict[str, Any]]] = {
    "closed": run_closed,
    "redis": run_redis,
    "open": run_open,
    "scaling": run_scaling,
    "spike": run_spike,
    "writer": run_writer,
    "techniques": run_techniques,
    "vouchers": run_vouchers,
    "loadgen": run_loadgen,
}


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> None:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    if args.render:
        report.write(store.load(args.results), args.output)
        print(f"wrote {args.output} from {args.results}")
        return
    preflight(args.sections)
    _stop_on_sigterm()
    cfg = settings()
    tokens.check(cfg)
    command = shlex.join([".venv/bin/python", "-m", "loadtest.bench", *raw])
    log_dir = REPORTS_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="loadtest-"))
    ctx = Context(args, cfg, options(args), workdir, log_dir, store.load(args.results))
    print(f"sections: {', '.join(args.sections)} (logs in {log_dir})", flush=True)
    try:
        for name in args.sections:
            rec = store.Recorder(name)
            begun = store.begin()
            try:
                about = RUNNERS[name](ctx, rec)
            except Exception as exc:  # noqa: BLE001 - one section failing leaves the others to run
                print(f"  ✗ {name} failed, its previous results kept: {exc}", flush=True)
                continue
            if rec.runs and all(r["problems"] and not r["metrics"] for r in rec.runs):
                print(f"  ✗ every run of {name} failed: its previous results kept", flush=True)
                continue
            data = store.section(command, begun, about, rec.runs)
            ctx.results["sections"][name] = data
            saved = store.save(name, data, args.results)
            report.write(ctx.results, args.output)
            print(f"  → {saved} written; {args.output} rewritten", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: servers stopped; finished sections kept", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        ctx.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"wrote {args.output} and {args.results}/")


if __name__ == "__main__":
    main()
