"""The ``starvation`` section: a steady open-loop purchase load on one gateway
process, without and then with a connection-starvation attack (rig/attack.py: silent
and slowloris sockets, each reopened as soon as the entry point closes it), side by side.

Both go to the entry point production uses (``--starvation-entry balancer``, the default): haproxy
with the fleet's configuration in front of the gateway (the harness's ``entry``), so
the attack meets haproxy's timeouts; ``--starvation-entry gateway`` attacks the process itself. The
gateway and haproxy run on core 0; the load, the attacker and the stack on core 1. bench.md gets a
table: the purchase latency of the same load with and without the attack, and what the attacker saw
(sockets opened, closed by the gateway, how long they lived).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from flashsale.fleet.haproxy import Edge
from kernel.fd_limit import raise_open_files_limit
from loadtest.bench import results as store
from loadtest.bench.context import Context, option
from loadtest.bench.harness import Harness
from loadtest.bench.overload import peak_rss_mb, rss_cell
from loadtest.bench.report import fmt
from loadtest.bench.servers import pinned
from loadtest.generators import openloop
from loadtest.measure import child
from rig import attack

SETTLE_S = 4.0  # the attack's sockets all open, the first ones already closed and reopened


def run(
    h: Harness, rate: float, seconds: float, silent: int, slowloris: int, edge: Edge | None
) -> dict[str, Any]:
    s = h.made_sale()
    token_file = h.token_file("starvation", int(rate * (seconds + 1)) + 1)
    with h.server("gateway") as served, h.entry(served, edge) as (base, balancer):
        attacker = None
        if silent or slowloris:
            port = base.rsplit(":", 1)[1]
            argv = [sys.executable, "-m", "rig.attack", "127.0.0.1", port]
            argv += ["--silent", str(silent), "--slowloris", str(slowloris)]
            argv += ["--seconds", str(SETTLE_S + seconds + 6)]
            cmd = pinned(h.opts.load_core, argv)
            attacker = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: S603
            time.sleep(SETTLE_S)
        try:
            result = openloop.measure(
                base + s.gateway.path,
                rate=rate,
                duration_s=seconds,
                warmup_s=1.0,
                connections=h.opts.open_connections,
                core=h.opts.load_core,
                tokens=token_file,
                timeout_s=seconds + 120,
            )
            result["peak_rss_mb"] = peak_rss_mb(served.pid)
            result["balancer_rss_mb"] = peak_rss_mb(balancer.pid) if balancer else None
            if attacker is not None:
                out, _ = attacker.communicate(timeout=seconds + 60)
                result["attack"] = child.result_line(
                    out.splitlines(), attack.SUMMARY_PREFIX, "rig.attack"
                )
        finally:
            if attacker is not None:
                attacker.kill()
    h.shards.clear_holds(s.gateway)
    return result


def table(rate: float, rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        f"| reserve load {rate:,.0f}/s | answered/s | p50 ms | p99 ms | p99.9 ms | max ms "
        "| statuses | peak RSS MB (gateway / haproxy) "
        "| attack sockets opened / closed by the entry point "
        "| socket lifetime p50 / p99 s (attacker's clock) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        a = r.get("attack")
        opened = f"{a['opened']:,} / {a['closed_by_server']:,}" if a else "-"
        lived = f"{a['lifetime_p50_s']:.1f} / {a['lifetime_p99_s']:.1f}" if a else "-"
        rss = rss_cell(r)
        lines.append(
            f"| {name} | {r['achieved_rps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['p999_ms']:.1f} | {r['max_ms']:.1f} | {r['statuses']} "
            f"| {rss} | {opened} | {lived} |"
        )
    return [*lines, ""]


@dataclass(frozen=True)
class StarvationOptions:
    rate: float = option(1000.0, "purchases per second")
    seconds: float = option(10.0, "measured seconds per run")
    silent: int = option(10_000, "silent attack sockets")
    slowloris: int = option(1_000, "slowloris attack sockets")
    entry: str = option("balancer", "balancer (haproxy) or gateway")

    def __post_init__(self) -> None:
        if self.entry not in ("balancer", "gateway"):
            raise ValueError("--starvation-entry: balancer or gateway")


def measure(ctx: Context, args: StarvationOptions, rec: store.Recorder) -> dict[str, Any]:
    edge = Edge.of(ctx.cfg) if args.entry == "balancer" else None
    raise_open_files_limit(args.silent + args.slowloris + 1024)
    h = ctx.own_harness("starvation", duration_s=args.seconds, warmup_s=1.0, open_connections=256)
    attacked = f"with {args.silent:,} silent + {args.slowloris:,} slowloris sockets"
    try:
        h.set_up_sale()
        for i, (name, silent, slow) in enumerate(
            (("without the attack", 0, 0), (attacked, args.silent, args.slowloris))
        ):
            rec.step(
                name,
                ("starvation", name, i),
                lambda s=silent, w=slow: (run(h, args.rate, args.seconds, s, w, edge), []),  # type: ignore[misc]
                lambda m: f"p99 {m['p99_ms']:.1f} ms, {m['achieved_rps']:,.0f}/s",
            )
    finally:
        h.close()
    return {**dataclasses.asdict(args), "repeats": 1}


def render(data: store.Section) -> list[str]:
    rows = [(r["subject"], r["metrics"]) for r in data["runs"] if r["metrics"]]
    out = ["## Connection starvation: the same load with and without an attack", ""]
    out += [*fmt.provenance(data), *table(data["settings"]["rate"], rows)]
    if len(rows) == 2:
        base, attacked = rows[0][1]["p99_ms"], rows[1][1]["p99_ms"]
        out += [f"Purchase p99 with the attack ÷ without: {attacked / base:.2f}×.", ""]
    return out
