"""``python -m loadtest.capacity.plan``: the fleet for a target, from the figures of the last
benchmark run (``loadtest/reports/sections/*.json``), with the reasoning line by line. The
model is ``loadtest.capacity.model``; bench.md checks it against measured points.

The gateway's costs come from the ``closed`` and ``open`` sections (``python -m loadtest.bench``)
or, where those were never run, from the ``balancer`` section (``python -m loadtest.bench
--only balancer``), which also gives the balancer tier's costs. Redis, writer and
load-generator figures are needed too: where no committed section holds a figure, the planner
names the section and the command that measures it and exits non-zero; it guesses nothing.

    .venv/bin/python -m loadtest.capacity.plan --rps 500000 --sold-out-share 0.98 --stock 10000 \\
        --items 1 --p99-ms 100
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from loadtest.bench import results as store
from loadtest.bench.stats import figure, select
from loadtest.capacity.emit import emit_k8s, k8s_options
from loadtest.capacity.model import (
    HEADROOM,
    BalancerFigures,
    Figures,
    Fleet,
    Latency,
    Measured,
    Target,
    plan,
)

T = TypeVar("T")
DEFAULT_TARGET = Target(rps=500_000, sold_out_share=0.98, stock=10_000, items=1, p99_ms=100)


class MissingFigure(LookupError):
    """Figures the model needs are in no committed section: the message names each, its
    section, and the one command that measures them all."""

    def __init__(self, lacking: Sequence[tuple[str, str]]) -> None:
        self.sections = list(dict.fromkeys(section for _, section in lacking))
        self.command = f".venv/bin/python -m loadtest.bench --only {','.join(self.sections)}"
        listed = "; ".join(f"{what} (section {section})" for what, section in lacking)
        super().__init__(f"no committed result for {listed}: run `{self.command}`")


def _median(
    res: store.Results, section: str, scenario: str, subject: str, metric: str, what: str
) -> Measured:
    runs = store.runs_of(res, section)
    found = figure(
        select([r for r in runs if not r["problems"]], section, scenario, subject), metric
    )
    if found is None:
        raise MissingFigure([(what, section)])
    date = res["sections"][section]["started_at"][:10]
    runs_word = "run" if found.count == 1 else "runs"
    return Measured(found.median, f"{what}, median of {found.count} {runs_word}, {date}")


PERCENTILES = {50.0: "p50_ms", 90.0: "p90_ms", 99.0: "p99_ms", 99.9: "p999_ms", 100.0: "max_ms"}


@dataclass
class OpenLoop:
    """The gateway's open-loop figures for one path, per offered fraction (medians)."""

    latency: dict[float, Latency] = field(default_factory=dict)
    cpu_us: dict[float, float] = field(default_factory=dict)
    generator_lagged: list[str] = field(default_factory=list)


def _open_loop(
    res: store.Results,
    scenario: str,
    section: str = "open",
    subject: str = "gateway",
    label: str | None = None,
) -> OpenLoop:
    """Per fraction, the medians of the runs ``<scenario>@<fraction>`` of ``subject``."""
    runs = store.runs_of(res, section)
    found_at = OpenLoop()
    scenarios = {r["scenario"] for r in runs if r["scenario"].startswith(f"{scenario}@")}
    for name in sorted(scenarios):
        mine = [r for r in select(runs, section, name, subject) if not r["problems"]]
        found = {pct: figure(mine, metric) for pct, metric in PERCENTILES.items()}
        if any(v is None for v in found.values()):
            continue
        fraction = float(name.split("@", 1)[1])
        found_at.latency[fraction] = {pct: v.median for pct, v in found.items() if v is not None}
        cpu = figure(mine, "cpu_us_per_req")
        if cpu is not None:
            found_at.cpu_us[fraction] = cpu.median
        if any(generator_short(r["metrics"]) for r in mine):
            found_at.generator_lagged.append(f"{label or scenario} at {fraction:.0%}")
    return found_at


GENERATOR_LAG_MS = 1.0


def generator_short(m: dict[str, Any]) -> bool:
    """The open-loop generator was a limit: at p99 it dispatched requests ≥ 1 ms after they were
    due (its event loop busy with answers), so its own delay is part of the latencies. Results
    from before it reported that: fewer answers than offered."""
    if not m:
        return False
    if "dispatch_lag_p99_ms" in m:
        return bool(m["dispatch_lag_p99_ms"] >= GENERATOR_LAG_MS)
    return bool(m.get("achieved_rps", 0.0) < 0.95 * m.get("offered_rps", 0.0))


def loadgen(res: store.Results) -> Measured | None:
    found = _optional(res, "loadgen", "ceiling", "locust", "rps", "one Locust worker")
    if found is None:
        found = _optional(
            res, "loadgen", "ceiling", "openloop", "rps", "one open-loop generator (no Locust run)"
        )
    return None if found is None else Measured(found.value, found.source + ", against nginx")


# The balancer section's scenario names (loadtest/bench/balancer.py).
BALANCER = "balancer"


def figures(res: store.Results) -> Figures:
    """The model's inputs from the committed results, every one of them: ``MissingFigure``
    names each that no committed section holds (nothing is guessed, no part left unsized)."""
    lacking: list[tuple[str, str]] = []

    def need(found: T | None, what: str, section: str) -> T | None:
        if found is None:
            lacking.append((what, section))
        return found

    def first(*where: tuple[str, str, str, str], what: str) -> Measured | None:
        try:
            return _first(res, *where, what=what)
        except MissingFigure as exc:
            lacking.append((what, exc.sections[0]))
            return None

    soldout, reserve = _open_loop(res, "sold_out"), _open_loop(res, "reserve")
    if not soldout.latency:
        soldout = _open_loop(res, "open", BALANCER, label="sold_out")
    if not reserve.latency:
        reserve = _open_loop(res, "reserve-open", BALANCER, label="reserve")
    need(soldout.latency or None, "the sold-out path's open-loop latency", "open")
    need(reserve.latency or None, "the reserve path's open-loop latency", "open")
    measured = sorted({*soldout.latency, *reserve.latency})
    source = "gateway open loop at " + "/".join(f"{f:.0%}" for f in measured) + " of its maximum"
    lagged = soldout.generator_lagged + reserve.generator_lagged
    if lagged:
        source += "; the generator lagged at " + ", ".join(lagged)
    names = {r["subject"] for r in store.runs_of(res, "redis")}
    stack = sorted(n for n in names if n.endswith("(stack)|16"))
    what = "EVALSHA -P 16 on a stack primary"
    redis_ops = need(
        _optional(res, "redis", "redis", stack[-1], "ops_per_s", what) if stack else None,
        what,
        "redis",
    )
    soldout_us = first(
        ("closed", "sold_out", "gateway", "cpu_us_per_req"),
        (BALANCER, "closed", "gateway", "cpu_us_per_req"),
        what="gateway CPU µs per sold-out",
    )
    reserve_us = first(
        ("closed", "reserve", "gateway", "cpu_us_per_req"),
        (BALANCER, "reserve", "gateway", "cpu_us_per_req"),
        what="gateway CPU µs per reserve",
    )
    what = "writer orders/s at batch 1,000"
    writer_rate = need(
        _optional(res, "writer", "batch", "1000", "orders_per_s", what), what, "writer"
    )
    loadgen_rps = need(loadgen(res), "one load-generator worker's req/s", "loadgen")
    if lacking or soldout_us is None or reserve_us is None:
        raise MissingFigure(lacking)
    return Figures(
        soldout_us=soldout_us,
        reserve_us=reserve_us,
        soldout_latency=soldout.latency,
        reserve_latency=reserve.latency,
        soldout_us_at=soldout.cpu_us,
        reserve_us_at=reserve.cpu_us,
        redis_ops=redis_ops,
        writer_rate=writer_rate,
        loadgen_rps=loadgen_rps,
        latency_source=source,
        other_loadgen=_optional(
            res, "loadgen", "ceiling", "openloop", "rps", "the open-loop generator"
        ),
        balancer=balancer(res),
    )


def _first(res: store.Results, *where: tuple[str, str, str, str], what: str) -> Measured:
    """The first of ``where`` (section, scenario, subject, metric) that was measured."""
    for section, scenario, subject, metric in where:
        found = _optional(res, section, scenario, subject, metric, what)
        if found is not None:
            return Measured(found.value, f"{found.source}, `{section}` section")
    raise MissingFigure([(what, where[0][0])])


def balancer(res: store.Results) -> BalancerFigures | None:
    """The balancer tier's costs, when ``python -m loadtest.bench --only balancer`` has run."""
    answer = _optional(
        res, BALANCER, "closed", "haproxy_410", "balancer_cpu_us_per_req",
        "haproxy CPU µs per 410 from its map",
    )  # fmt: skip
    forward = _optional(
        res, BALANCER, "closed", "haproxy_gateway", "balancer_cpu_us_per_req",
        "haproxy CPU µs per forwarded request",
    )  # fmt: skip
    if answer is None or forward is None:
        return None
    own = _open_loop(res, "open", BALANCER, subject="haproxy_410", label="the balancer's 410s")
    reserve_measured = (
        _open_loop(res, "reserve").latency or _open_loop(res, "reserve-open", BALANCER).latency
    )
    if own.generator_lagged or not reserve_measured:
        # The generator's own delay (or no reserve path at all) is no latency of the tier's.
        why = "its open-loop runs were generator-bound" if own.generator_lagged else ""
        return BalancerFigures(answer, forward, {}, why or "no reserve-path latency measured")
    return BalancerFigures(answer, forward, own.latency, "the balancer's own open-loop latency")


def _optional(
    res: store.Results, section: str, scenario: str, subject: str, metric: str, what: str
) -> Measured | None:
    try:
        return _median(res, section, scenario, subject, metric, what)
    except MissingFigure:
        return None


def table(fleet: Fleet, target: Target) -> list[tuple[str, str]]:
    def sized(part: str, value: str) -> str:
        return f"not sized: no committed {part} result" if part in fleet.missing else value

    rows = [
        ("gateway processes (= cores)", f"{fleet.gateway_processes:,}"),
        ("gateway cores busy at the target", f"{fleet.gateway_cores_busy:,.2f}"),
        ("utilisation per core", f"{fleet.utilisation:.0%} (headroom {target.headroom:.0%})"),
        ("predicted p99", _p99(fleet.predicted_p99_ms, fleet.p99_met)),
    ]
    if fleet.tier is not None:
        t = fleet.tier
        rows += [
            ("with a balancer tier: balancer cores", f"{t.balancer_cores:,}"),
            ("  balancer cores busy", f"{t.balancer_cores_busy:,.2f}"),
            (
                "  gateway processes (= cores)",
                f"{t.gateway_processes:,} at {t.gateway_utilisation:.0%}",
            ),
            ("  predicted p99", _p99(t.predicted_p99_ms, t.p99_met)),
            ("  edge cores (balancers + gateways)", f"{t.edge_cores:,}"),
        ]
    return rows + [
        ("shards per hot item", sized("redis", f"{fleet.shards_per_item}")),
        ("Redis primaries (+ a replica each)", sized("redis", f"{fleet.redis_primaries}")),
        ("Kafka partitions (at least)", sized("writers", f"{fleet.kafka_partitions}")),
        ("writer processes", sized("writers", f"{fleet.writers}")),
        ("load-generator workers (+ 1 master)", sized("load", f"{fleet.loadgen_workers:,}")),
    ]


def _p99(p99: float | None, met: bool) -> str:
    if p99 is None:
        return "not checked: no usable open-loop latency (see the reasoning)"
    return f"{p99:.1f} ms ({'met' if met else 'NOT met'})"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.capacity.plan", description=__doc__)
    d = DEFAULT_TARGET
    p.add_argument("--rps", type=float, default=d.rps, help="offered req/s at the peak")
    p.add_argument("--sold-out-share", type=float, default=d.sold_out_share)
    p.add_argument("--stock", type=int, default=d.stock, help="units per item")
    p.add_argument("--items", type=int, default=d.items, help="hot items on sale at once")
    p.add_argument("--p99-ms", type=float, default=d.p99_ms)
    p.add_argument("--headroom", type=float, default=HEADROOM, help="busiest a core may run")
    p.add_argument("--drain-s", type=float, default=d.drain_s, help="orders stored within (s)")
    p.add_argument(
        "--results", type=Path, default=store.SECTIONS_DIR, help="the committed section files"
    )
    p.add_argument(
        "--emit",
        nargs=2,
        metavar=("k8s", "DIR"),
        help="also write the fleet's Kubernetes manifests into DIR (loadtest/capacity/k8s.py)",
    )
    k8s_options(p)
    args = p.parse_args(argv)
    if args.emit and args.emit[0] != "k8s":
        p.error(f"--emit: k8s is the one kind, not {args.emit[0]!r}")
    if not 0 <= args.sold_out_share <= 1 or not 0 < args.headroom <= 1:
        p.error("--sold-out-share must be in [0, 1] and --headroom in (0, 1]")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    target = Target(
        args.rps,
        args.sold_out_share,
        args.stock,
        args.items,
        args.p99_ms,
        args.headroom,
        args.drain_s,
    )
    res = store.load(args.results)
    try:
        fig = figures(res)
    except MissingFigure as exc:
        raise SystemExit(f"cannot plan from {args.results}: {exc}") from None
    fleet = plan(target, fig)
    print(
        f"target: {target.rps:,.0f} req/s, {target.sold_out_share:.0%} sold-out answers,"
        f" {target.stock:,} units × {target.items} item(s), p99 ≤ {target.p99_ms:g} ms,"
        f" cores at ≤ {target.headroom:.0%}, orders stored within {target.drain_s:g} s"
    )
    print(f"figures: {args.results} (the last run of each section)")
    print("\nreasoning:")
    for line in fleet.reasons:
        print(f"  {line}")
    print("\nfleet:")
    rows = table(fleet, target)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if args.emit:
        emit_k8s(Path(args.emit[1]), fleet, target, fig, args)


if __name__ == "__main__":
    main()
