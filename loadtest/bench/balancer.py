"""The ``balancer`` section: what a sold-out answer costs at the balancer.

Four subjects answer the same sold-out purchase 410, side by side in one run, rotated per repeat:

- ``haproxy_410``: haproxy (the fleet's configuration, ``flashsale/fleet/haproxy.py``) with the
  item in its sold-out map: it answers itself; the gateway behind it sees nothing;
- ``haproxy_gateway``: the same haproxy, map empty, forwarding to a gateway that answers from its
  sold-out flag;
- ``nginx``: ``return 410`` (``loadtest/baselines/nginx.conf``), the ceiling;
- ``gateway``: the gateway alone, from its flag.

The servers (haproxy and its gateway both) run on the server core, wrk and the open-loop generator
on the load core, the stack moved off the server core (``loadtest.bench.affinity``). Per subject:
closed-loop req/s (wrk) and the server side's CPU µs per answer (haproxy's and the gateway's
apart), then open-loop latency at ``--balancer-fraction`` of that subject's own closed-loop
maximum. The gateway's reserve path is measured too (closed loop, and open loop at the same
fraction): the capacity planner needs it for the requests the balancer forwards.

Last, the model against a fleet (``--balancer-fleet``): a private 2-gateway fleet in network
namespaces (``flashsale.fleet``), pinned to the server core, sent two closed-loop crowds at once
through its balancer: one at an item in the map, one at an item only the gateways know is sold out.
The costs measured above predict the fleet's CPU per answer at the share that resulted, and so its
req/s on one core; the row says how far the measured figures are.

The section ``balancer`` of ``python -m loadtest.bench`` (options ``--balancer-*``); the planner
reads its committed result (``python -m loadtest.capacity.plan``).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from flashsale.fleet import fleet, haproxy
from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from loadtest.bench import affinity, sale
from loadtest.bench import results as store
from loadtest.bench.context import Context, option
from loadtest.bench.harness import GATEWAY_ENV, Harness, Measured, Served, wrk_problems
from loadtest.bench.report.fmt import provenance
from loadtest.bench.stats import summarize
from loadtest.capacity.plan import GENERATOR_LAG_MS  # as the planner judges the generator
from loadtest.generators import wrk
from loadtest.measure.cpu import used
from rig.admin import NewItem, new_sale

SECTION = "balancer"
SUBJECTS = ("haproxy_410", "haproxy_gateway", "nginx", "gateway")
TITLES = {
    "haproxy_410": "haproxy answers 410 (item in its map)",
    "haproxy_gateway": "haproxy → gateway (gateway's flag)",
    "nginx": "nginx `return 410`",
    "gateway": "gateway alone (its flag)",
}
PARTS = ("closed", "open", "same", "reserve", "fleet")
IDLE_S = 3.0  # the fleet's processes measured with no load, before the mixed run


@dataclass(frozen=True)
class BalancerOptions:
    duration: float = option(6.0, "seconds per measured run")
    connections: int = option(64, "wrk connections (sold-out)")
    fraction: float = option(0.5, "open loop: of each subject's max")
    same_rate: float = option(2000.0, "open loop: also every subject at this one req/s (0: not)")
    fleet: bool = option(True, "the 2-gateway fleet check")
    # 256 answered 503s past the Redis deadline on the loaded machine.
    reserve_connections: int = option(64, "wrk connections, reserve")
    parts: str = option(
        ",".join(PARTS), "parts to measure again; the committed section keeps the others"
    )
    fleet_share_connections: str = option(
        "58,6", "fleet: connections at the map item, the gateway item"
    )

    @property
    def part_set(self) -> set[str]:
        found = {p for p in self.parts.split(",") if p}
        if found - set(PARTS):
            raise ValueError(f"unknown balancer parts {sorted(found - set(PARTS))}")
        if "open" in found and "closed" not in found:
            raise ValueError("balancer part open takes its rates from closed, in the same run")
        return found


@dataclass
class Bench:
    cfg: Settings
    h: Harness
    args: BalancerOptions
    extra_items: list[sale.Item] = field(default_factory=list)  # dropped from Redis at the end

    # --- closed loop ---------------------------------------------------------------------

    def closed(self, subject: str) -> Measured:
        if subject in ("nginx", "gateway"):
            alone, problems = self.h.closed_sold_out(subject)
            alone["balancer_cpu_us_per_req"] = 0.0
            alone["gateway_cpu_us_per_req"] = (
                alone["cpu_us_per_req"] if subject == "gateway" else 0.0
            )
            return alone, problems
        o = self.h.opts
        with self.behind_haproxy(subject) as (gw, bal, url):
            wrk.run(url, o.warmup_s, o.soldout_connections, o.load_core)
            hits = sale.metric(gw.base, "sold_out_flag")
            with used(gw.pid, bal.pid) as use:
                result = wrk.run(url, o.duration_s, o.soldout_connections, o.load_core)
            forwarded = sale.metric(gw.base, "sold_out_flag") - hits
        n = result.requests
        metrics: dict[str, Any] = {**result.as_dict(), **use.figures(n)}
        metrics["gateway_cpu_us_per_req"] = use.of(gw.pid) / n * 1e6 if n else 0.0
        metrics["balancer_cpu_us_per_req"] = use.of(bal.pid) / n * 1e6 if n else 0.0
        metrics["forwarded"] = forwarded
        problems = wrk_problems(result, expect_2xx=False)
        if subject == "haproxy_410" and forwarded:
            problems.append(f"{forwarded:.0f} requests reached the gateway")
        # haproxy's queue timeout (the edge's overload shedding) may answer a few 503s itself;
        # they cost little and change no per-answer figure, but more than 1% is not this test.
        metrics["shed"] = n - forwarded if subject == "haproxy_gateway" else 0
        if subject == "haproxy_gateway" and forwarded < 0.99 * n:
            problems.append(f"{forwarded:.0f} of {n} answered from the gateway's flag")
        return metrics, problems

    @contextmanager
    def behind_haproxy(self, subject: str) -> Iterator[tuple[Served, haproxy.Balancer, str]]:
        """The harness's gateway (flagged), haproxy in front of it on the server core."""
        s = self.h.made_sale()
        with self.h.server("gateway") as gw:
            for _ in range(2):  # the first asks Redis and flags the item, the second checks
                status = sale.purchase(gw.base, s.sold_out, self.h.token())
                if status != 410:
                    raise RuntimeError(f"the flagging purchase answered {status}")
            # The entry set by hand lives for the run (an entry's expire is the flag TTL).
            edge = replace(haproxy.Edge.of(self.cfg), sold_out_ttl_ms=86_400_000)
            with self.h.entry(gw, edge, name=subject) as (_, bal):
                assert bal is not None
                if subject == "haproxy_410":
                    haproxy.command(bal.socket, haproxy.set_sold_out(s.sold_out.path))
                yield gw, bal, bal.base + s.sold_out.path

    # --- open loop -----------------------------------------------------------------------

    def open(self, subject: str, rate: float) -> Measured:
        if subject in ("nginx", "gateway"):
            metrics, problems = self.h.open_sold_out(subject, rate)
        else:
            with self.behind_haproxy(subject) as (_, bal, url):
                # The harness's open-loop run, its CPU meter on haproxy's session.
                metrics = self.h.open_loop(Served(bal.base, bal.pid), url, rate, None)
            metrics["balancer_cpu_us_per_req"] = metrics["cpu_us_per_req"]
            other = {k: v for k, v in metrics["statuses"].items() if k != "410"}
            problems = [f"answers other than 410: {other}"] if other else []
        metrics["offered_rps"] = rate
        # Still a figure, but the table marks it: the generator's own delay is in it.
        metrics["generator_bound"] = metrics.get("dispatch_lag_p99_ms", 0.0) >= GENERATOR_LAG_MS
        return metrics, problems

    # --- the fleet -----------------------------------------------------------------------

    def fleet_mix(self) -> Measured:
        """Two wrk crowds at once through a pinned 2-gateway fleet's balancer."""
        o = self.h.opts
        s = self.h.made_sale()
        mapped, forwarded_conns = (int(c) for c in self.args.fleet_share_connections.split(","))
        core = str(o.server_core)
        with (
            fleet.private(self.cfg, "fbn") as cfg,
            affinity.stack_on(self.cfg, {o.load_core}),
        ):
            env = {**GATEWAY_ENV, **settings_env(trusted_proxies=())}
            try:
                hosts = fleet.up(cfg, 2, env, cores=core)
                fleet.agent(cfg).stop()  # the table holds exactly the one item, set by hand
                base = fleet.balancer_url(cfg)
                other = _one_unit_item(fleet.operator_url(cfg), cfg, self.h.token())
                self.extra_items.append(other)
                for host in hosts:  # every gateway flags both items (2 tries: its workers)
                    for item in (s.sold_out, other):
                        for _ in range(2):
                            sale.purchase(fleet.gateway_url(cfg, host), item, self.h.token())
                root = fleet.paths(cfg)
                # (GATEWAY_ENV's flag TTL, a day, is the entry's expire too)
                haproxy.command(root.socket, haproxy.clear_sold_out())
                haproxy.command(root.socket, haproxy.set_sold_out(s.sold_out.path))
                found = [fleet.balancer(cfg).pid(), *(fleet.gateway(cfg, h).pid() for h in hosts)]
                pids = [pid for pid in found if pid is not None]
                if len(pids) < len(found):
                    raise RuntimeError("a fleet process is not running")
                for url, conns in ((s.sold_out.path, mapped), (other.path, forwarded_conns)):
                    wrk.run(base + url, o.warmup_s, conns, o.load_core)
                # What the processes burn with no load at all (health checks, the gateways'
                # background loops): the model adds it, it is no answer's cost.
                with used(*pids) as idle:
                    time.sleep(IDLE_S)
                results: dict[str, wrk.WrkResult] = {}
                with used(*pids) as busy:
                    threads = [
                        threading.Thread(
                            target=lambda k=key, u=url, c=conns: results.__setitem__(
                                k, wrk.run(base + u, o.duration_s, c, o.load_core)
                            )
                        )
                        for key, url, conns in (
                            ("mapped", s.sold_out.path, mapped),
                            ("forwarded", other.path, forwarded_conns),
                        )
                    ]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
            finally:
                fleet.down(cfg)
        a, b = results["mapped"], results["forwarded"]
        n = a.requests + b.requests
        wall = max(a.duration_s, b.duration_s)
        metrics = {
            "mapped": a.requests,
            "forwarded": b.requests,
            "share": a.requests / n,
            "rps": n / wall,
            "balancer_cpu_us_per_req": busy.of(pids[0]) / n * 1e6,
            "gateway_cpu_us_per_req": sum(busy.of(p) for p in pids[1:]) / n * 1e6,
            "idle_balancer_cores": idle.of(pids[0]) / idle.wall_s,
            "idle_gateway_cores": sum(idle.of(p) for p in pids[1:]) / idle.wall_s,
            "p99_ms_mapped": a.p99_ms,
            "p99_ms_forwarded": b.p99_ms,
        }
        metrics["cpu_us_per_req"] = (
            metrics["balancer_cpu_us_per_req"] + metrics["gateway_cpu_us_per_req"]
        )
        metrics["server_busy"] = busy.total_s / wall
        return metrics, wrk_problems(a, False) + wrk_problems(b, False)


def _one_unit_item(base: str, cfg: Settings, buyer: bytes) -> sale.Item:
    """A second sold-out item: one unit, bought at once."""
    made = new_sale(
        base, cfg, [NewItem("balancer-fwd", 1, 1, price=990)], opens_at=time.time() - 5, hours=1
    )
    item = sale.Item(made["items"][0]["itemId"], 1)
    deadline = time.monotonic() + cfg.item_cache_seconds + 5
    while (status := sale.purchase(base, item, buyer)) in (403, 503):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if status != 202:
        raise RuntimeError(f"buying the forwarded item's only unit answered {status}")
    return item


# --- the run ---------------------------------------------------------------------------------


def _median(
    runs: Sequence[Mapping[str, Any]], scenario: str, subject: str, key: str
) -> float | None:
    found = summarize(
        r["metrics"][key]
        for r in runs
        if r["scenario"] == scenario
        and r["subject"] == subject
        and r["metrics"]
        and key in r["metrics"]
    )
    return None if found is None else found.median


def measure(ctx: Context, args: BalancerOptions, rec: store.Recorder) -> dict[str, Any]:
    """The section: every part in ``args.parts``; a part not measured keeps its committed runs."""
    cfg, repeats, parts = ctx.cfg, ctx.args.repeats, args.part_set
    kept_from = _keep(ctx.results["sections"].get(SECTION), parts, rec)
    h = ctx.own_harness(
        SECTION, duration_s=args.duration, warmup_s=1.0, soldout_connections=args.connections,
        reserve_connections=args.reserve_connections, open_connections=256,
    )  # fmt: skip
    b = Bench(cfg, h, args)

    def steps(
        scenario: str,
        run: Callable[[str], Measured],
        subjects: Sequence[str] = SUBJECTS,
        only: Collection[str] | None = None,
    ) -> None:
        """Every repeat of the scenario (if its part is measured now), the subjects rotated (the
        ones in ``only``, if given): a step each."""
        for repeat in range(repeats if _part(scenario) in parts else 0):
            for subject in store.rotate(subjects, repeat):
                if only is None or subject in only:
                    where = (scenario, subject, repeat)
                    rec.step(
                        f"{scenario} {subject} #{repeat + 1}", where, partial(run, subject), _say
                    )

    f = args.fraction
    try:
        h.set_up_sale()
        steps("closed", b.closed)
        tops = {s: t for s in SUBJECTS if (t := _median(rec.runs, "closed", s, "rps")) is not None}
        steps(f"open@{f:g}", lambda s: b.open(s, tops[s] * f), only=tops)
        if args.same_rate:
            steps("open-same", lambda s: b.open(s, args.same_rate))
        steps("reserve", h.closed_reserve, ["gateway"])
        if top := _median(rec.runs, "reserve", "gateway", "rps"):
            steps(f"reserve-open@{f:g}", lambda s: h.open_reserve(s, top * f), ["gateway"])
        if args.fleet:
            steps("fleet", lambda _: b.fleet_mix(), ["fleet2"])
    finally:
        for item in b.extra_items:
            h.shards.drop(item)
        h.close()
    return {
        "duration_s": args.duration,
        "repeats": repeats,
        "connections": args.connections,
        "fraction": args.fraction,
        "same_rate": args.same_rate,
        "fleet_connections": args.fleet_share_connections,
        "parts": sorted(parts),
        **({"other_parts_from": kept_from} if kept_from else {}),
    }


def _keep(stored: store.Section | None, parts: set[str], rec: store.Recorder) -> str | None:
    """The committed runs of the parts not measured now, kept; the run they came from."""
    if stored is None or parts == set(PARTS):
        return None
    kept = [r for r in stored["runs"] if _part(r["scenario"]) not in parts]
    rec.runs.extend(kept)
    return f"{stored['started_at']} ({stored['command']})" if kept else None


def _part(scenario: str) -> str:
    """Which part of the run a scenario belongs to (``--only``)."""
    if scenario.startswith("reserve"):
        return "reserve"
    if scenario == "open-same":
        return "same"
    return scenario.split("@", 1)[0]


def _say(m: dict[str, Any]) -> str:
    if not m:
        return "no figures"
    parts = [f"{m.get('rps', m.get('achieved_rps', 0)):,.0f} req/s"]
    if "cpu_us_per_req" in m:
        parts.append(f"{m['cpu_us_per_req']:.1f} µs/answer")
    if m.get("balancer_cpu_us_per_req"):
        parts.append(f"(balancer {m['balancer_cpu_us_per_req']:.1f})")
    if "p99_ms" in m:
        parts.append(f"p99 {m['p99_ms']:.2f} ms")
    return ", ".join(parts)


# --- the page ---------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "—" if value is None else format(value, spec)


def render(data: store.Section) -> list[str]:
    """The section's part of bench.md: the table and the fleet check."""
    runs = [r for r in data["runs"] if r["metrics"] and not r["problems"]]
    failed = [r for r in data["runs"] if r["problems"]]
    fraction = data["settings"]["fraction"]
    open_name = f"open@{fraction:g}"

    def med(scenario: str, subject: str, key: str) -> float | None:
        return _median(runs, scenario, subject, key)

    base_us = med("closed", "gateway", "cpu_us_per_req")
    kept = data["settings"].get("other_parts_from")
    out = [
        "## The balancer answering sold out",
        "",
        *provenance(data),
        *([f"Parts not measured in that run are from {kept}.", ""] if kept else []),
        "Medians of the repeats that passed their"
        f" checks ({data['settings']['repeats']} each), subjects rotated per repeat. The server"
        " side (haproxy, and the gateway behind it) on core 0, wrk (1 thread,"
        f" {data['settings']['connections']} connections) and the open-loop generator on core 1."
        " *CPU µs per answer* is each server process's CPU time over the run ÷ the answers; the"
        " answering path is haproxy alone when the item is in its map (the gateway behind it"
        " only idles: health checks and its background loops), haproxy and the gateway when it"
        " forwards. *Answers per core-s* is 10⁶ ÷ the answering path's µs: what one busy core"
        " does. *Core busy* below 100% means wrk (one core, shared with the stack and everyone"
        " else's work) was the limit of the closed-loop rate, not the server.",
        "",
        "| subject | closed req/s | server core busy | CPU µs/answer, answering path | of which"
        f" haproxy | gateway | answers per core-s | ÷ gateway alone | open loop @{fraction:.0%}:"
        " offered req/s | p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for subject in SUBJECTS:
        bal = med("closed", subject, "balancer_cpu_us_per_req")
        gw = med("closed", subject, "gateway_cpu_us_per_req")
        path = {"haproxy_410": bal, "haproxy_gateway": med("closed", subject, "cpu_us_per_req")}
        us = path.get(subject, med("closed", subject, "cpu_us_per_req"))
        per_core = None if not us else 1e6 / us
        vs = None if not us or not base_us else base_us / us
        lag = any(
            r["metrics"].get("generator_bound")
            for r in runs
            if r["scenario"] == open_name and r["subject"] == subject
        )
        idle = " (idle)" if subject == "haproxy_410" else ""
        p50, p99 = med(open_name, subject, "p50_ms"), med(open_name, subject, "p99_ms")
        out.append(
            f"| {TITLES[subject]} | {_fmt(med('closed', subject, 'rps'))}"
            f" | {_fmt(med('closed', subject, 'server_busy'), '.0%')} | {_fmt(us, '.1f')}"
            f" | {_fmt(bal, '.1f') if subject.startswith('haproxy') else '—'}"
            f" | {_fmt(gw, '.1f') if subject != 'nginx' else '—'}{idle}"
            f" | {_fmt(per_core)} | {_fmt(vs, '.2f')}×"
            f" | {_fmt(med(open_name, subject, 'offered_rps'))}"
            f" | {_fmt(p50, '.2f')} / {_fmt(p99, '.2f')}{' (generator-bound)' if lag else ''} |"
        )
    out += [
        "",
        f"Open loop: each subject at {fraction:.0%} of its own closed-loop rate, from the"
        " open-loop generator (one Python process on the load core, `loadtest/generators/"
        "openloop.py`). *generator-bound*: it sent its requests ≥ 1 ms late at p99, so its own"
        " delay is in the latencies; a dash: every repeat failed its checks (listed below:"
        " requests never answered within the run, or haproxy's queue timeout answering 503)."
        " On 2 shared cores the generator cannot offer half of what haproxy or nginx serve:"
        " those rows say nothing about the servers' latency.",
    ]
    out += _same_rate(runs, data["settings"].get("same_rate", 0.0))
    re_us = med("reserve", "gateway", "cpu_us_per_req")
    re_open = f"reserve-open@{fraction:g}"
    out += [
        "",
        "The gateway's reserve path in the same run (the requests the balancer forwards to"
        f" it): {_fmt(med('reserve', 'gateway', 'rps'))} req/s closed loop,"
        f" {_fmt(re_us, '.1f')} µs per answer; open loop at {fraction:.0%}: p50 / p99"
        f" {_fmt(med(re_open, 'gateway', 'p50_ms'), '.1f')} /"
        f" {_fmt(med(re_open, 'gateway', 'p99_ms'), '.1f')} ms.",
    ]
    out += _fleet_check(runs, med)
    if failed:
        out += ["", "Runs left out (a check failed; the planner skips them too):", ""]
        out += [
            f"- {r['scenario']} {r['subject']} #{r['repeat'] + 1}: {'; '.join(r['problems'])}"
            for r in failed
        ]
    return [*out, ""]


def _same_rate(runs: list[dict[str, Any]], rate: float) -> list[str]:
    """Every subject at one offered rate the generator can keep: latency at equal load."""
    if not any(r["scenario"] == "open-same" for r in runs):
        return []
    out = [
        "",
        f"The same open loop at one rate for all, {rate:,.0f} req/s (within the generator's"
        " reach; for each server a different, small share of its core):",
        "",
        "| subject | p50 ms | p90 ms | p99 ms | p99.9 ms | generator |",
        "|---|---|---|---|---|---|",
    ]
    for subject in SUBJECTS:
        mine = [r for r in runs if r["scenario"] == "open-same" and r["subject"] == subject]
        if not mine:
            out.append(f"| {TITLES[subject]} | — | — | — | — | every repeat failed |")
            continue

        def mid(key: str, rows: list[dict[str, Any]] = mine) -> str:
            found = summarize(r["metrics"][key] for r in rows if key in r["metrics"])
            return "—" if found is None else f"{found.median:.2f}"

        lag = any(r["metrics"].get("generator_bound") for r in mine)
        out.append(
            f"| {TITLES[subject]} | {mid('p50_ms')} | {mid('p90_ms')} | {mid('p99_ms')}"
            f" | {mid('p999_ms')} | {'lagged (≥ 1 ms at p99)' if lag else 'on time'} |"
        )
    return out


def _fleet_check(runs: list[dict[str, Any]], med: Any) -> list[str]:
    """Each tier's CPU per answer in the fleet, predicted from the single-process rows."""
    fleet_runs = [r["metrics"] for r in runs if r["scenario"] == "fleet"]
    h410 = med("closed", "haproxy_410", "balancer_cpu_us_per_req")
    fwd_bal = med("closed", "haproxy_gateway", "balancer_cpu_us_per_req")
    fwd_gw = med("closed", "haproxy_gateway", "gateway_cpu_us_per_req")
    if not fleet_runs or None in (h410, fwd_bal, fwd_gw):
        return []
    bal_pred, gw_pred, bal_ratio, gw_ratio = [], [], [], []
    for m in fleet_runs:
        share, rps = m["share"], m["rps"]
        b = share * h410 + (1 - share) * fwd_bal + m["idle_balancer_cores"] * 1e6 / rps
        g = (1 - share) * fwd_gw + m["idle_gateway_cores"] * 1e6 / rps
        bal_pred.append(b)
        gw_pred.append(g)
        bal_ratio.append(m["balancer_cpu_us_per_req"] / b)
        gw_ratio.append(m["gateway_cpu_us_per_req"] / g)

    def mid(key: str) -> float:
        return float(statistics.median(m[key] for m in fleet_runs))

    def span(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}× ({min(values):.2f}–{max(values):.2f})"

    return [
        "",
        "The model against a fleet: 2 gateway hosts in network namespaces behind haproxy, all"
        " pinned to core 0, two wrk crowds at once through the balancer (one at an item in its"
        " map, one at an item only the gateways' flags know). Predicted from the rows above at"
        " the share that resulted, per answer: balancer = share × haproxy's 410 + (1 − share) ×"
        " haproxy forwarding; gateways = (1 − share) × the gateway's flag behind haproxy; each"
        f" plus what its processes burn idle (measured for {IDLE_S:g} s before the load:"
        f" {_idle(fleet_runs)}) spread over the answers. The fleet's req/s is not predicted:"
        f" its processes kept {mid('server_busy'):.0%} of their core busy, so the generator"
        " (and the machine's other load) set the rate, not the fleet.",
        "",
        "| fleet of 2 | req/s | share answered by the map | balancer µs/answer predicted |"
        " measured | measured ÷ predicted | gateways µs/answer predicted | measured |"
        " measured ÷ predicted |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {len(fleet_runs)} run(s), medians | {mid('rps'):,.0f} | {mid('share'):.1%}"
        f" | {statistics.median(bal_pred):.1f} | {mid('balancer_cpu_us_per_req'):.1f}"
        f" | {span(bal_ratio)} | {statistics.median(gw_pred):.1f}"
        f" | {mid('gateway_cpu_us_per_req'):.1f} | {span(gw_ratio)} |",
    ]


def _idle(fleet_runs: list[dict[str, Any]]) -> str:
    bal = statistics.median(m.get("idle_balancer_cores", 0.0) for m in fleet_runs)
    gws = statistics.median(m.get("idle_gateway_cores", 0.0) for m in fleet_runs)
    return f"haproxy {bal:.1%} of a core, the 2 gateways {gws:.1%}"
