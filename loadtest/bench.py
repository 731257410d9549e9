"""``python -m loadtest.bench``: measure the purchase path side by side with its baselines, in one
run, and rewrite ``bench.md`` from the results (raw: ``loadtest/reports/bench-results.json``).

Phase 1, closed loop (wrk), every repeat: (a) sold-out path on the gateway, a bare ASGI app and
nginx; (b) reserve path on the gateway and the naive gateway; (c) the reserve script on one Redis
core, unpipelined and pipelined. Phase 2, open loop, every repeat: (a) and (b) again at a fixed
offered rate, a quarter of the slowest subject's median closed-loop rate unless given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from flashsale.config import PROJECT_ROOT, settings

from . import machine, redisbench, report, tokens
from .harness import GATEWAY_ENV, Harness, Options
from .sale import RESERVE_SHARDS, RESERVE_STOCK
from .stats import figure, select

SOLD_OUT_SUBJECTS = ("gateway", "bare_asgi", "nginx")
RESERVE_SUBJECTS = ("gateway", "naive")
PIPELINES = (1, 16)
OPEN_LOOP_CAP = 4_000.0  # what the Python open-loop generator offers steadily on one core
OPEN_LOOP_SHARE = 0.25  # of the slowest subject's closed-loop rate: loaded, not saturated
REPORTS = PROJECT_ROOT / "loadtest" / "reports"
T = TypeVar("T")


def rotate(items: Sequence[T], by: int) -> list[T]:
    """The run order of a repeat: rotated each time, so drift does not always hit one subject."""
    by %= len(items)
    return [*items[by:], *items[:by]]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="repeats of every run (default 3)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 3 s runs, 1 repeat")
    p.add_argument("--soldout-connections", type=int, default=64)
    p.add_argument("--reserve-connections", type=int, default=128)
    p.add_argument("--open-connections", type=int, default=256)
    p.add_argument("--soldout-rate", type=float, help="open-loop offered rate, sold-out path")
    p.add_argument("--reserve-rate", type=float, help="open-loop offered rate, reserve path")
    p.add_argument("--skip-open-loop", action="store_true", help="closed loop and Redis only")
    p.add_argument("--output", type=Path, default=report.BENCH_MD, help="the report to rewrite")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.repeats = 3.0, 1
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


def preflight() -> None:
    missing = [
        t
        for t in ("wrk", "taskset", "nginx", "redis-benchmark", "redis-server")
        if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()
    ]
    if missing:
        raise SystemExit(f"missing tools: {', '.join(missing)}")
    if (machine.describe()["nproc"]) < 2:
        raise SystemExit("needs 2 cores: the server on core 0, the load generator on core 1")


def step(
    h: Harness, label: str, where: tuple[str, str, str, int], run: Callable[..., Any], *args: Any
) -> None:
    """One run, with a progress line; a run that fails is recorded as failed, and the rest go on
    (the gateway is being edited by others while this runs)."""
    print(f"  {label} ...", end="", flush=True)
    started = time.monotonic()
    try:
        result: dict[str, Any] = run(*args)
    except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
        print(f" FAILED: {exc}", flush=True)
        h.record(*where, {}, [f"run failed: {str(exc)[:300]}"])
        return
    m = result["metrics"]
    if "rps" in m:
        figures = f"{m['rps']:,.0f} req/s, p99 {m['p99_ms']:.2f} ms"
    elif "achieved_rps" in m:
        figures = f"{m['achieved_rps']:,.0f} req/s, p99 {m['p99_ms']:.2f} ms"
    else:
        figures = f"{m['ops_per_s']:,.0f} EVALSHA/s, p99 {m['p99_ms']:.2f} ms"
    if "cpu_us_per_req" in m:
        figures += f", server {m['cpu_us_per_req']:.0f} CPU µs/req, {m['server_busy']:.0%} busy"
    flag = "" if not result["problems"] else "  CHECK FAILED: " + "; ".join(result["problems"])
    print(f" {figures} ({time.monotonic() - started:.0f} s){flag}", flush=True)


def closed_phase(h: Harness, repeats: int) -> None:
    for r in range(repeats):
        print(f"[closed loop] repeat {r + 1}/{repeats}", flush=True)
        for subject in rotate(SOLD_OUT_SUBJECTS, r):
            where = ("closed", "sold_out", subject, r)
            step(h, f"(a) sold-out  {subject:<9}", where, h.closed_sold_out, subject, r)
        for subject in rotate(RESERVE_SUBJECTS, r):
            where = ("closed", "reserve", subject, r)
            step(h, f"(b) reserve   {subject:<9}", where, h.closed_reserve, subject, r)
        port = redisbench.stack_primary(_ports(h))
        stack = redisbench.Node(f"cluster node :{port} (stack)", port, cluster=True)
        with h.standalone_redis() as standalone:
            for node in rotate([stack, standalone], r):
                for pipeline in rotate(PIPELINES, r):
                    label = f"(c) redis -P {pipeline:<2} {node.name}"
                    where = ("redis", "redis", f"{node.name}|{pipeline}", r)
                    step(h, label, where, h.redis, node, pipeline, r)


def _ports(h: Harness) -> list[int]:
    return [int(node.rsplit(":", 1)[1]) for node in h.cfg.redis_nodes]


def open_rates(
    args: argparse.Namespace, runs: list[dict[str, Any]]
) -> tuple[dict[str, float], dict[str, str]]:
    """Offered rates: as given, else a quarter of the slowest subject's median closed-loop rate."""
    rates: dict[str, float] = {}
    basis: dict[str, str] = {}
    for scenario, subjects, given in (
        ("sold_out", SOLD_OUT_SUBJECTS, args.soldout_rate),
        ("reserve", RESERVE_SUBJECTS, args.reserve_rate),
    ):
        if given:
            rates[scenario], basis[scenario] = given, "set on the command line"
            continue
        medians = [
            f.median for s in subjects if (f := figure(select(runs, "closed", scenario, s), "rps"))
        ]
        if not medians:
            continue
        rate = _round(min(medians) * OPEN_LOOP_SHARE)
        basis[scenario] = f"{OPEN_LOOP_SHARE:.0%} of the slowest subject's median closed-loop req/s"
        if rate > OPEN_LOOP_CAP:
            rate, basis[scenario] = OPEN_LOOP_CAP, "the open-loop generator's steady ceiling"
        rates[scenario] = rate
    return rates, basis


def _round(value: float) -> float:
    """Two significant digits: 3342 -> 3300."""
    if value < 10:
        return max(1.0, round(value))
    digits = len(str(int(value))) - 2
    return float(round(value, -digits))


def open_phase(h: Harness, repeats: int, rates: dict[str, float]) -> None:
    for r in range(repeats):
        print(f"[open loop] repeat {r + 1}/{repeats}", flush=True)
        if "sold_out" in rates:
            for subject in rotate(SOLD_OUT_SUBJECTS, r):
                label = f"(a) sold-out  {subject:<9} at {rates['sold_out']:,.0f}/s"
                where = ("open", "sold_out", subject, r)
                step(h, label, where, h.open_sold_out, subject, r, rates["sold_out"])
        if "reserve" in rates:
            for subject in rotate(RESERVE_SUBJECTS, r):
                label = f"(b) reserve   {subject:<9} at {rates['reserve']:,.0f}/s"
                where = ("open", "reserve", subject, r)
                step(h, label, where, h.open_reserve, subject, r, rates["reserve"])


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> None:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    preflight()
    _stop_on_sigterm()
    cfg = settings()
    tokens.check(cfg)
    opts = options(args)
    started = dt.datetime.now(dt.UTC)
    about = machine.describe()
    log_dir = REPORTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="loadtest-"))
    h = Harness(cfg, opts, workdir, log_dir)
    rates: dict[str, float] = {}
    basis: dict[str, str] = {}
    try:
        print(f"set-up: sale through a gateway on :{h.ports['gateway']} (logs in {log_dir})")
        bench_sale = h.set_up_sale()
        print(f"  sale {bench_sale.sale_id}, items {[i.item_id for i in bench_sale.items]}")
        closed_phase(h, args.repeats)
        if not args.skip_open_loop:
            rates, basis = open_rates(args, h.runs)
            open_phase(h, args.repeats, rates)
    except KeyboardInterrupt:
        print("\ninterrupted: servers stopped; bench.md left as it was", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        h.close()
        shutil.rmtree(workdir, ignore_errors=True)
    about["loadavg_end"] = machine.loadavg()
    results = {
        "command": shlex.join([".venv/bin/python", "-m", "loadtest.bench", *raw]),
        "started_at": started.strftime("%Y-%m-%d %H:%M:%S"),
        "finished_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": about,
        "versions": machine.versions(),
        "settings": {
            "duration_s": opts.duration_s,
            "repeats": args.repeats,
            "warmup_s": opts.warmup_s,
            "server_core": opts.server_core,
            "load_core": opts.load_core,
            "soldout_connections": opts.soldout_connections,
            "reserve_connections": opts.reserve_connections,
            "open_connections": opts.open_connections,
            "open_warmup_s": opts.open_warmup_s,
            "open_rates": rates,
            "open_rate_basis": basis,
            "reserve_stock": RESERVE_STOCK,
            "reserve_shards": RESERVE_SHARDS,
            "redis_clients": opts.redis_clients,
            "redis_calls": opts.redis_calls,
            "redis_random_range": redisbench.RANDOM_RANGE,
            "redis_nodes": sorted(
                {r["subject"].rsplit("|", 1)[0] for r in h.runs if r["phase"] == "redis"}
            ),
            "gateway_env": GATEWAY_ENV,
            "sale_id": bench_sale.sale_id,
        },
        "runs": h.runs,
    }
    report.write(results, report.RESULTS_PATH, args.output)
    print(f"wrote {args.output} and {report.RESULTS_PATH}")


if __name__ == "__main__":
    main()
