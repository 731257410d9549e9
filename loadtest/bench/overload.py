"""``python -m loadtest.bench.overload``: one gateway process offered 2×, 5× and 10× its measured
maximum, open loop, on the reserve path and on the sold-out path, side by side with the same run
at 0.5× and 1×.

The load goes to the entry point production uses (``--entry balancer``, the default): haproxy
with the fleet's configuration (flashsale/fleet/haproxy.py) in front of the gateway, where a
gateway is given ``edge_server_maxconn`` requests at once and the excess waits or is refused
503 in haproxy; ``--entry gateway`` loads the process directly, as before. The gateway and haproxy
run on core 0 (the server side, as in loadtest/bench/balancer.py: on core 1 haproxy waited
behind the generator, which spins, and the stack), the generator (loadtest/bench/phased.py, the
open-loop generator with stepped rates) and the stack on core 1. The maximum of each path is
its closed-loop req/s (wrk, straight at the gateway, as in the benchmark's closed section)
unless given. Each run starts a fresh gateway (so
its peak RSS is the run's own): a warm-up at 0.5×, the measured phase, then 0.5× again to time
the recovery: the seconds from the end of the overload until every 100 ms window is answered,
all accepted, none slower than 3× the p99 at 0.5×. Prints a Markdown table per path.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from flashsale.fleet import haproxy
from flashsale.fleet.haproxy import Edge
from flashsale.stack.processes import http_ready
from kernel.settings import settings
from loadtest.bench import phased, phased_vegeta, servers
from loadtest.bench.harness import Harness, Options, Served
from loadtest.bench.sale import Item, purchase
from loadtest.bench.servers import pinned
from loadtest.constants import BENCH_PORTS, REPORTS_DIR
from loadtest.generators import tokens
from loadtest.measure.cpu import used
from rig.ports import free_port

WARMUP_S, AFTER_S = 2.0, 4.0
RECOVERY_BOUND = 3.0  # × the p99 at 0.5×
ACCEPTED = {"reserve": 202, "sold_out": 410}
ADMISSION_OFF = {"FLASHSALE_ADMISSION_TARGET_MS": "0"}


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block (a gateway started inside it
    inherits them: the harness's own settings for it come on top)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def peak_rss_mb(session: int) -> float:
    """The largest peak resident set (VmHWM) of the processes in ``session``: the worker's."""
    peak = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if os.getsid(int(status.parent.name)) != session:
                continue
            found = re.search(r"^VmHWM:\s+(\d+) kB", status.read_text(), re.M)
        except (OSError, ValueError):
            continue
        peak = max(peak, int(found.group(1)) if found else 0)
    return peak / 1024


def rss_cell(row: Mapping[str, Any]) -> str:
    """A row's peak RSS in MB, as its table cell: the gateway's, then haproxy's if it ran."""
    cell = f"{row['peak_rss_mb']:.0f}"
    if row.get("balancer_rss_mb") is not None:
        cell += f" / {row['balancer_rss_mb']:.0f}"
    return cell


def gateway_counts(base: str) -> dict[str, float]:
    """The gateway's admission refusals and its loop's turn histogram, from /metrics."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    pattern = (
        r'^flashsale_(admission_refused_total\{reason="\w+"\}'
        r'|event_loop_turn_seconds_bucket\{le="[^"]+"\}) (\S+)$'
    )
    return {name: float(value) for name, value in re.findall(pattern, text, re.M)}


@contextlib.contextmanager
def entry(
    h: Harness, served: Served, edge: Edge | None, core: int | None = None
) -> Iterator[tuple[str, haproxy.Balancer | None]]:
    """Where the load goes: (base URL, the balancer or None). ``edge`` None: the gateway
    itself; else haproxy in front of it, pinned to ``core`` (default: the server core, with
    the gateway)."""
    if edge is None:
        yield served.base, None
        return
    port = free_port(set(h.ports.values()), BENCH_PORTS)
    workdir = h.workdir / f"haproxy-{port}"
    gateway = served.base.removeprefix("http://")
    prefix = pinned(h.opts.server_core if core is None else core, [])
    log = h.log_dir / "haproxy.log"
    with haproxy.serving(gateway, port, workdir, edge, prefix, log) as balancer:
        yield balancer.base, balancer


class Overload:
    def __init__(
        self, h: Harness, seconds: float, connections: int, vegeta_bin: str, balancer_core: int
    ) -> None:
        self.h = h
        self.balancer_core = balancer_core
        self.seconds = seconds
        self.connections = connections
        self.vegeta = vegeta_bin  # "": the project's generator

    def run(
        self,
        path: str,
        maximum: float,
        multiple: float,
        baseline_p99: float | None,
        edge: Edge | None,
    ) -> dict[str, Any]:
        h, s = self.h, self.h.bench_sale
        assert s is not None, "set_up_sale() first"
        half = maximum * 0.5
        phases = [
            phased.Phase(half, WARMUP_S),
            phased.Phase(maximum * multiple, self.seconds),
            phased.Phase(half, AFTER_S),
        ]
        item = s.gateway if path == "reserve" else s.sold_out
        token_file = self._tokens(phases) if path == "reserve" else None
        with (
            h.server("gateway") as served,
            entry(h, served, edge, self.balancer_core) as (
                base,
                balancer,
            ),
        ):
            if path == "sold_out":
                self._flag(served, item)
            pids = {"gateway": served.pid, **({"haproxy": balancer.pid} if balancer else {})}
            with used(*pids.values()) as use:
                result = self._load(base + item.path, phases, ACCEPTED[path], token_file)
            result["cpu_s"] = {name: use.of(pid) for name, pid in pids.items()}
            result["peak_rss_mb"] = peak_rss_mb(served.pid)
            result["balancer_rss_mb"] = peak_rss_mb(balancer.pid) if balancer else None
            result["balancer"] = haproxy.overload_counts(balancer.socket) if balancer else None
            result["gateway"] = gateway_counts(served.base)
        if path == "reserve":
            assert h.shards is not None
            h.shards.clear_holds(item)
        bound = (baseline_p99 or result["ok_p99_ms"]) * RECOVERY_BOUND
        result["recovery_s"] = phased.recovery_s(result.pop("after_windows"), bound)
        result["multiple"] = multiple
        return result

    def _load(
        self, url: str, phases: list[phased.Phase], accepted: int, token_file: Path | None
    ) -> dict[str, Any]:
        core = self.h.opts.load_core
        if self.vegeta:
            return phased_vegeta.measure(
                self.vegeta, url, phases, accepted=accepted, connections=self.connections,
                core=core, tokens=token_file, workdir=self.h.workdir,
            )  # fmt: skip
        return phased.measure(
            url, phases, accepted=accepted, connections=self.connections, core=core,
            tokens=token_file, timeout_s=sum(p.seconds for p in phases) + 120,
        )  # fmt: skip

    def ceiling(self, rate: float) -> dict[str, Any]:
        """The generator against nginx ``return 410`` on the server core at ``rate`` for the
        overload's length: could it offer the rate, and on time?"""
        h = self.h
        port = free_port(set(h.ports.values()), BENCH_PORTS)
        url = f"http://127.0.0.1:{port}/"
        argv = servers.nginx_argv(port, h.workdir / "nginx")
        ready = http_ready(url, 410)
        with servers.running("nginx-ceiling", argv, ready, h.log_dir, h.opts.server_core):
            warm = phased.Phase(rate, 1.0)
            r = self._load(url, [warm, phased.Phase(rate, self.seconds)], 410, None)
        return {
            "rate": rate, "sent_rps": r.get("sent_rps"), "answered_rps": r["goodput_rps"],
            "lag_p99_ms": r["dispatch_lag_p99_ms"], "p99_ms": r["all_p99_ms"],
        }  # fmt: skip

    def _tokens(self, phases: Sequence[phased.Phase]) -> Path:
        # The generator reads its phases back from "%g" text: a few more than the floats say.
        count = int(sum(p.rate * p.seconds for p in phases)) + 1000
        return tokens.write(
            self.h.cfg, self.h.workdir / "overload.tokens", self.h.buyers.take(count)
        )

    def _flag(self, served: Served, item: Item) -> None:
        token = next(tokens.signed(self.h.cfg, self.h.buyers.take(1)))
        status = purchase(served.base, item, token)
        if status != 410:
            raise RuntimeError(f"flagging the sold-out item answered {status}")


def maxima(h: Harness, given: dict[str, float | None]) -> dict[str, float]:
    found = {}
    for path, value in given.items():
        if value is None:
            closed = h.closed_reserve if path == "reserve" else h.closed_sold_out
            with environ(ADMISSION_OFF):  # wrk counts 503s as answers too
                measured, problems = closed("gateway")
            if problems:
                print(f"  closed-loop {path}: {problems}", flush=True)
            value = float(measured["rps"])
        found[path] = value
        print(f"maximum of {path}: {value:,.0f} req/s", flush=True)
    return found


def generator_limited(r: dict[str, Any]) -> bool:
    """The generator sent under 95% of the rate it was asked for (vegeta counts what it sent;
    phased.py queues what it cannot send, which its lag shows)."""
    sent = r.get("sent_rps")
    return sent is not None and sent < 0.95 * r["offered_rps"]


def table(path: str, maximum: float, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"### {path.replace('_', '-')} path (maximum {maximum:,.0f} req/s, closed loop)",
        "",
        "| offered | entry, admission | goodput req/s | ÷ max | accepted p99 ms | ÷ p99 at 0.5× "
        "| refused req/s | refusal p99 ms | unanswered or other | peak RSS MB (gateway / haproxy) "
        "| recovery s | generator lag p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = next(
        (r["ok_p99_ms"] for r in rows if r["multiple"] == 0.5), None
    )  # the first 0.5× run: the entry's, admission on
    for r in rows:
        ratio = f"{r['ok_p99_ms'] / base:.2f}×" if base else "-"
        recovery = f"{r['recovery_s']:.1f}" if r["recovery_s"] is not None else "not within 4 s"
        offered = f"{r['multiple']:g}× ({r['offered_rps']:,.0f}/s)"
        if generator_limited(r):
            offered += f" † sent {r['sent_rps']:,.0f}/s"
        rss = rss_cell(r)
        lines.append(
            f"| {offered} | {r['run']} | {r['goodput_rps']:,.0f} "
            f"| {r['goodput_rps'] / maximum:.2f} | {r['ok_p99_ms']:,.1f} | {ratio} "
            f"| {r['refused_rps']:,.0f} | {r['refused_p99_ms']:,.1f} "
            f"| {r['counts']['other'] + r['unanswered']:,} | {rss} "
            f"| {recovery} | {r['dispatch_lag_p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench.overload", description=__doc__)
    p.add_argument("--seconds", type=float, default=10.0, help="of overload per run")
    p.add_argument("--multiples", default="0.5,1,2,5,10")
    p.add_argument("--paths", default="reserve,sold_out")
    p.add_argument("--reserve-max", type=float)
    p.add_argument("--soldout-max", type=float)
    # Enough that the offered rate reaches the server: with 256, at 2× the generator itself
    # queued 12,814 requests for a free connection (HTTP/1.1: one request per connection), and
    # the server never saw the overload it was meant to shed.
    p.add_argument("--connections", type=int, default=2048)
    p.add_argument("--target-ms", type=float, help="admission target (default: the setting's)")
    p.add_argument(
        "--without-admission",
        default="",
        help="multiples also run with the gateway's admission off",
    )
    p.add_argument(
        "--entry", choices=("balancer", "gateway"), default="balancer",
        help="load haproxy in front of the gateway (production's entry point) or the gateway",
    )  # fmt: skip
    p.add_argument(
        "--direct", default="2", help="multiples also run straight at the gateway, side by side"
    )
    p.add_argument(
        "--server-maxconn", default="", help="haproxy's per-gateway maxconn; a list: a row each"
    )
    p.add_argument("--queue-per-server", type=int, help="queued per gateway before a 503")
    p.add_argument("--queue-ms", type=int, help="haproxy's timeout queue")
    p.add_argument(
        "--vegeta", default="", help="vegeta binary: it offers the load instead of phased.py"
    )
    p.add_argument(
        "--stack-on",
        choices=("load", "server"),
        default="load",
        help="the stack's core: the generator's (default) or the gateway's, so the generator "
        "never takes CPU from Redis and Kafka",
    )
    p.add_argument(
        "--balancer-on",
        choices=("server", "load"),
        default="server",
        help="haproxy's core: the gateway's (default) or the generator's, as a balancer on a "
        "host of its own would take none of the gateway's CPU",
    )
    p.add_argument(
        "--ceiling", action="store_true", help="first the generator against nginx at each rate"
    )
    return p.parse_args(argv)


def edges_of(args: argparse.Namespace) -> list[Edge | None]:
    """The balancer's limits: the settings', with any the command line gives on top (one
    per ``--server-maxconn`` value); [None] for the gateway itself."""
    if args.entry != "balancer":
        return [None]
    given = {"queue_per_server": args.queue_per_server, "queue_timeout_ms": args.queue_ms}
    edge = dataclasses.replace(
        Edge.of(settings()), **{k: v for k, v in given.items() if v is not None}
    )
    maxconns = [int(m) for m in args.server_maxconn.split(",") if m]
    return [dataclasses.replace(edge, server_maxconn=m) for m in maxconns] or [edge]


def run_label(edge: Edge | None, admission: str) -> str:
    if edge is None:
        return f"gateway, {admission}"
    return f"balancer maxconn {edge.server_maxconn}, {admission}"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    cfg = settings()
    tokens.check(cfg)
    opts = Options(
        duration_s=5.0, warmup_s=2.0, soldout_connections=64, reserve_connections=256,
        open_connections=args.connections, open_warmup_s=1.0, redis_clients=50, redis_calls={},
        stack_core=Options.server_core if args.stack_on == "server" else None,
    )  # fmt: skip
    log_dir = REPORTS_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    paths = [p for p in args.paths.split(",") if p]
    multiples = [float(m) for m in args.multiples.split(",") if m]
    off = [float(m) for m in args.without_admission.split(",") if m]
    direct = [float(m) for m in args.direct.split(",") if m] if args.entry == "balancer" else []
    with tempfile.TemporaryDirectory(prefix="overload-") as workdir:
        h = Harness(cfg, opts, Path(workdir), log_dir)
        try:
            h.set_up_sale()
            given = {"reserve": args.reserve_max, "sold_out": args.soldout_max}
            top = maxima(h, {p: given[p] for p in paths})
            edges = edges_of(args)
            print(f"entry: {edges}", flush=True)
            balancer_core = opts.load_core if args.balancer_on == "load" else opts.server_core
            bench = Overload(h, args.seconds, args.connections, args.vegeta, balancer_core)
            if args.ceiling:
                for path in paths:
                    for m in sorted({m for m in multiples + direct if m > 1}):
                        print(
                            f"  ceiling {m:g}× {path}: {bench.ceiling(top[path] * m)}", flush=True
                        )
            tables = []
            on = {"FLASHSALE_ADMISSION_TARGET_MS": str(args.target_ms)} if args.target_ms else {}
            runs = [(m, e, run_label(e, "on"), on) for m in multiples for e in edges]
            runs += [(m, e, run_label(e, "off"), ADMISSION_OFF) for m in off for e in edges]
            runs += [(m, None, run_label(None, "on"), on) for m in direct]
            runs.sort(key=lambda run: run[0])  # each multiple's runs back to back: side by side
            for path in paths:
                rows: list[dict[str, Any]] = []
                for multiple, run_edge, label, env in runs:
                    base_p99 = next((r["ok_p99_ms"] for r in rows if r["multiple"] == 0.5), None)
                    with environ(env):
                        row = bench.run(path, top[path], multiple, base_p99, run_edge)
                    row["run"] = label
                    rows.append(row)
                    print(f"  {path} {multiple:g}× {label}: {_brief(row)}", flush=True)
                tables.append(table(path, top[path], rows))
                (REPORTS_DIR / f"overload-{path}.json").write_text(_json(rows))
            print("\n\n".join(tables))
        finally:
            h.close()


def _brief(r: dict[str, Any]) -> str:
    return (
        f"goodput {r['goodput_rps']:,.0f}/s, accepted p99 {r['ok_p99_ms']:.1f} ms, "
        f"refused {r['refused_rps']:,.0f}/s p99 {r['refused_p99_ms']:.1f} ms, "
        f"rss {r['peak_rss_mb']:.0f} MB, recovery {r['recovery_s']}, statuses {r['statuses']}, "
        f"balancer {r['balancer']}, admission {_refusals(r['gateway'])}"
    )


def _refusals(counts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in counts.items() if k.startswith("admission")}


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1)


if __name__ == "__main__":
    main()
