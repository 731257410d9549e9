"""The ``overload`` section: one gateway process offered 2×, 5× and 10× its measured
maximum, open loop, on the reserve path and on the sold-out path, side by side with the same run
at 0.5× and 1×.

The load goes to the entry point production uses (``--overload-entry balancer``, the default):
haproxy with the fleet's configuration (flashsale/fleet/haproxy.py) in front of the gateway, where
a gateway is given ``edge_server_maxconn`` requests at once and the excess waits or is refused 503
in haproxy; ``--overload-entry gateway`` loads the process directly, as before. The gateway and
haproxy run on core 0 (the server side, as in loadtest/bench/balancer.py: on core 1 haproxy waited
behind the generator, which spins, and the stack), the generator (loadtest/generators/phased.py,
the open-loop generator with stepped rates) and the stack on core 1. The maximum of each path is
its closed-loop req/s (wrk, straight at the gateway, as in the benchmark's closed section) unless
given. Each run starts a fresh gateway (so its peak RSS is the run's own): a warm-up at 0.5×, the
measured phase, then 0.5× again to time the recovery: the seconds from the end of the overload
until every 100 ms window is answered, all accepted, none slower than 3× the p99 at 0.5×. bench.md
gets a table per path.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flashsale.fleet import haproxy
from flashsale.fleet.haproxy import Edge
from flashsale.stack.processes import http_ready
from kernel.settings import settings
from loadtest.bench import results as store
from loadtest.bench import servers
from loadtest.bench.context import Context, floats, option
from loadtest.bench.harness import Harness, Served
from loadtest.bench.report import fmt
from loadtest.bench.sale import Item, purchase
from loadtest.constants import BENCH_PORTS
from loadtest.generators import phased, phased_vegeta
from loadtest.measure.cpu import used
from rig.ports import free_port

WARMUP_S, AFTER_S = 2.0, 4.0
RECOVERY_BOUND = 3.0  # × the p99 at 0.5×
ACCEPTED = {"reserve": 202, "sold_out": 410}
ADMISSION_OFF = {"FLASHSALE_ADMISSION_TARGET_MS": "0"}


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
        env: dict[str, str],
    ) -> dict[str, Any]:
        h, s = self.h, self.h.made_sale()
        half = maximum * 0.5
        phases = [
            phased.Phase(half, WARMUP_S),
            phased.Phase(maximum * multiple, self.seconds),
            phased.Phase(half, AFTER_S),
        ]
        item = s.gateway if path == "reserve" else s.sold_out
        token_file = self._tokens(phases) if path == "reserve" else None
        with (
            h.server("gateway", env=env) as served,
            h.entry(served, edge, self.balancer_core) as (base, balancer),
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
        return self.h.token_file("overload", int(sum(p.rate * p.seconds for p in phases)) + 1000)

    def _flag(self, served: Served, item: Item) -> None:
        status = purchase(served.base, item, self.h.token())
        if status != 410:
            raise RuntimeError(f"flagging the sold-out item answered {status}")


def maxima(h: Harness, given: dict[str, float | None]) -> dict[str, float]:
    found = {}
    for path, value in given.items():
        if value is None:
            closed = h.closed_reserve if path == "reserve" else h.closed_sold_out
            # Admission off: wrk would count its 503s as answers too.
            measured, problems = closed("gateway", env=ADMISSION_OFF)
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


def table(path: str, maximum: float, rows: list[dict[str, Any]]) -> list[str]:
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
    return [*lines, ""]


@dataclass(frozen=True)
class OverloadOptions:
    seconds: float = option(10.0, "of overload per run")
    multiples: str = option("0.5,1,2,5,10", "of each path's maximum")
    paths: str = option("reserve,sold_out", "reserve, sold_out")
    reserve_max: float = option(0.0, "req/s (0: measured closed loop)")
    soldout_max: float = option(0.0, "req/s (0: measured closed loop)")
    # Enough that the offered rate reaches the server: with 256, at 2× the generator itself
    # queued 12,814 requests for a free connection (HTTP/1.1: one request per connection), and
    # the server never saw the overload it was meant to shed.
    connections: int = option(2048, "open-loop connections")
    target_ms: float = option(0.0, "admission target (0: the setting's)")
    without_admission: str = option("", "multiples also run admission off")
    entry: str = option("balancer", "balancer (haproxy in front) or gateway")
    direct: str = option("2", "multiples also run straight at the gateway")
    server_maxconn: str = option("", "haproxy's per-gateway maxconn list")
    queue_per_server: int = option(0, "queued per gateway (0: setting's)")
    queue_ms: int = option(0, "haproxy's timeout queue (0: setting's)")
    vegeta: str = option("", "vegeta binary: it offers the load instead")
    stack_on: str = option("load", "the stack's core: load or server")
    balancer_on: str = option("server", "haproxy's core: server or load")
    ceiling: bool = option(False, "first the generator against nginx")

    def __post_init__(self) -> None:
        for name, allowed in (
            ("entry", ("balancer", "gateway")),
            ("stack_on", ("load", "server")),
            ("balancer_on", ("server", "load")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"--overload-{name.replace('_', '-')}: one of {allowed}")


def edges_of(args: OverloadOptions) -> list[Edge | None]:
    """The balancer's limits: the settings', with any the command line gives on top (one
    per ``--server-maxconn`` value); [None] for the gateway itself."""
    if args.entry != "balancer":
        return [None]
    edge = Edge.of(settings())
    if args.queue_per_server:
        edge = dataclasses.replace(edge, queue_per_server=args.queue_per_server)
    if args.queue_ms:
        edge = dataclasses.replace(edge, queue_timeout_ms=args.queue_ms)
    maxconns = [int(m) for m in args.server_maxconn.split(",") if m]
    return [dataclasses.replace(edge, server_maxconn=m) for m in maxconns] or [edge]


def run_label(edge: Edge | None, admission: str) -> str:
    if edge is None:
        return f"gateway, {admission}"
    return f"balancer maxconn {edge.server_maxconn}, {admission}"


def measure(ctx: Context, args: OverloadOptions, rec: store.Recorder) -> dict[str, Any]:
    paths = [p for p in args.paths.split(",") if p]
    multiples = floats(args.multiples)
    off = floats(args.without_admission)
    direct = floats(args.direct) if args.entry == "balancer" else []
    h = ctx.own_harness(
        "overload", duration_s=5.0, warmup_s=2.0, open_connections=args.connections,
        stack_core=ctx.opts.server_core if args.stack_on == "server" else None,
    )  # fmt: skip
    opts = h.opts
    try:
        h.set_up_sale()
        given = {"reserve": args.reserve_max or None, "sold_out": args.soldout_max or None}
        top = maxima(h, {p: given[p] for p in paths})
        edges = edges_of(args)
        print(f"entry: {edges}", flush=True)
        balancer_core = opts.load_core if args.balancer_on == "load" else opts.server_core
        bench = Overload(h, args.seconds, args.connections, args.vegeta, balancer_core)
        if args.ceiling:
            for path in paths:
                for m in sorted({m for m in multiples + direct if m > 1}):
                    found = bench.ceiling(top[path] * m)
                    rec.record("ceiling", f"{path} {m:g}×", 0, found, [])
                    print(f"  ceiling {m:g}× {path}: {found}", flush=True)
        on = {"FLASHSALE_ADMISSION_TARGET_MS": f"{args.target_ms:g}"} if args.target_ms else {}
        runs = [(m, e, run_label(e, "on"), on) for m in multiples for e in edges]
        runs += [(m, e, run_label(e, "off"), ADMISSION_OFF) for m in off for e in edges]
        runs += [(m, None, run_label(None, "on"), on) for m in direct]
        runs.sort(key=lambda run: run[0])  # each multiple's runs back to back: side by side
        for path in paths:
            rows: list[dict[str, Any]] = []
            for multiple, run_edge, label, env in runs:
                base_p99 = next((r["ok_p99_ms"] for r in rows if r["multiple"] == 0.5), None)

                def one(
                    m: float = multiple,
                    e: Edge | None = run_edge,
                    lab: str = label,
                    en: dict[str, str] = env,
                    b: float | None = base_p99,
                ) -> tuple[dict[str, Any], list[str]]:
                    row = bench.run(path, top[path], m, b, e, en)  # noqa: B023 - this pass's
                    row["run"] = lab
                    return row, []

                done = rec.step(
                    f"{path} {multiple:g}× {label}", (path, label, len(rows)), one, _brief
                )
                if done["metrics"]:
                    rows.append(done["metrics"])
    finally:
        h.close()
    return {**dataclasses.asdict(args), "repeats": 1, "maxima": top}


CEILING_RATES = ("rate", "answered_rps")


def render(data: store.Section) -> list[str]:
    """A table per path, the rows in the order they ran; the generator's ceilings, if measured."""
    maxima: dict[str, float] = data["settings"]["maxima"]
    out = ["## Overload: 2×, 5×, 10× one gateway's maximum", "", *fmt.provenance(data)]
    for path, top in maxima.items():
        rows = [r["metrics"] for r in data["runs"] if r["scenario"] == path and r["metrics"]]
        out += table(path, top, rows)
    ceilings = [r for r in data["runs"] if r["scenario"] == "ceiling"]
    if ceilings:
        out += ["The generator against nginx `return 410` at each offered rate:", ""]
        out += fmt.table(
            ["path, multiple", "offered req/s", "answered req/s", "lag p99 ms", "p99 ms"],
            [
                [r["subject"], *(fmt.rate(r["metrics"][k] or 0.0) for k in CEILING_RATES),
                 fmt.ms(r["metrics"]["lag_p99_ms"]), fmt.ms(r["metrics"]["p99_ms"])]
                for r in ceilings
            ],
        )  # fmt: skip
    return out


def _brief(r: dict[str, Any]) -> str:
    return (
        f"goodput {r['goodput_rps']:,.0f}/s, accepted p99 {r['ok_p99_ms']:.1f} ms, "
        f"refused {r['refused_rps']:,.0f}/s p99 {r['refused_p99_ms']:.1f} ms, "
        f"rss {r['peak_rss_mb']:.0f} MB, recovery {r['recovery_s']}, statuses {r['statuses']}, "
        f"balancer {r['balancer']}, admission {_refusals(r['gateway'])}"
    )


def _refusals(counts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in counts.items() if k.startswith("admission")}
