"""``python -m loadtest.bench.starvation``: a steady open-loop purchase load on one gateway
process, without and then with a connection-starvation attack (rig/attack.py: silent
and slowloris sockets, each reopened as soon as the entry point closes it), side by side.

Both go to the entry point production uses (``--entry balancer``, the default): haproxy with
the fleet's configuration in front of the gateway (loadtest/bench/overload.py's ``entry``), so
the attack meets haproxy's timeouts; ``--entry gateway`` attacks the process itself. The gateway
and haproxy run on core 0; the load, the attacker and the stack on core 1. Prints a Markdown
table: the purchase latency of the same load with and without the attack, and what the
attacker saw (sockets opened, closed by the gateway, how long they lived).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashsale.fleet.haproxy import Edge
from kernel.fd_limit import raise_open_files_limit
from kernel.settings import settings
from loadtest.bench.harness import Harness, Options
from loadtest.bench.overload import entry, peak_rss_mb, rss_cell
from loadtest.bench.servers import pinned
from loadtest.constants import REPORTS_DIR
from loadtest.generators import openloop, tokens
from loadtest.measure import child
from rig import attack

SETTLE_S = 4.0  # the attack's sockets all open, the first ones already closed and reopened


def run(
    h: Harness, rate: float, seconds: float, silent: int, slowloris: int, edge: Edge | None
) -> dict[str, Any]:
    s = h.bench_sale
    assert s is not None, "set_up_sale() first"
    count = int(rate * (seconds + 1)) + 1
    token_file = tokens.write(h.cfg, h.workdir / "starvation.tokens", h.buyers.take(count))
    with h.server("gateway") as served, entry(h, served, edge) as (base, balancer):
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
    assert h.shards is not None
    h.shards.clear_holds(s.gateway)
    return result


def table(rate: float, rows: list[tuple[str, dict[str, Any]]]) -> str:
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
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench.starvation", description=__doc__)
    p.add_argument("--rate", type=float, default=1000.0, help="purchases per second")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--silent", type=int, default=10_000)
    p.add_argument("--slowloris", type=int, default=1_000)
    p.add_argument(
        "--entry", choices=("balancer", "gateway"), default="balancer",
        help="haproxy in front of the gateway (production's entry point) or the gateway itself",
    )  # fmt: skip
    args = p.parse_args(argv)
    edge = Edge.of(settings()) if args.entry == "balancer" else None
    raise_open_files_limit(args.silent + args.slowloris + 1024)
    cfg = settings()
    tokens.check(cfg)
    opts = Options(
        duration_s=args.seconds, warmup_s=1.0, soldout_connections=64, reserve_connections=256,
        open_connections=256, open_warmup_s=1.0, redis_clients=50, redis_calls={},
    )  # fmt: skip
    log_dir = REPORTS_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="starvation-") as workdir:
        h = Harness(cfg, opts, Path(workdir), log_dir)
        try:
            h.set_up_sale()
            rows = [
                ("without the attack", run(h, args.rate, args.seconds, 0, 0, edge)),
                (
                    f"with {args.silent:,} silent + {args.slowloris:,} slowloris sockets",
                    run(h, args.rate, args.seconds, args.silent, args.slowloris, edge),
                ),
            ]
        finally:
            h.close()
    (REPORTS_DIR / "starvation.json").write_text(json.dumps(rows, indent=1))
    base, attacked = rows[0][1]["p99_ms"], rows[1][1]["p99_ms"]
    print(table(args.rate, rows))
    print(f"\npurchase p99 with the attack ÷ without: {attacked / base:.2f}×")


if __name__ == "__main__":
    main()
