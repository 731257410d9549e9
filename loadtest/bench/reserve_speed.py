"""The ``reserve_speed`` section: the reserve path of code trees side by side.

Each tree (``--compare NAME=DIR|REV``: a copy of the project or a revision; the current code is
always the last)
serves one gateway worker pinned to the server core, the load generator runs on the other core;
the trees alternate within every round (rotated order), so both see the same machine. The
shared stack is left where the scheduler puts it (other people use it: nothing is re-pinned).

- closed loop: wrk, 256 connections, a fresh buyer token per request (every answer a 202):
  req/s and the gateway's CPU µs per 202 at saturation; the naive gateway beside them;
- open loop at fractions of each tree's own median closed-loop rate, by two instruments on the
  same gateway process: the project's generator (``loadtest.generators.openloop``) and vegeta
  (``--reserve-speed-vegeta``: a targets file with one buyer token per request), whose latencies
  are given both as vegeta reports them (from the moment it sent) and from each request's
  intended send time (``seq / rate``, as the project's generator measures);
- each generator's ceiling against nginx ``return 410`` at 2x the highest offered rate;
- ``--reserve-speed-profile S``: a py-spy sampling profile of the first tree's worker under
  closed-loop load, its samples bucketed into the stages of one 202 (``loadtest.measure.profile``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flashsale import stack
from flashsale.stack.processes import http_ready, process_group, settings_env, wait_ready
from kernel.settings import PROJECT_ROOT
from loadtest.bench import results as store
from loadtest.bench import sale, servers, topics
from loadtest.bench.context import Context, floats, option
from loadtest.bench.harness import GATEWAY_ENV, Harness
from loadtest.bench.report import fmt
from loadtest.bench.stats import Run, figure, paired_ratio, select
from loadtest.generators import openloop, wrk
from loadtest.generators import vegeta as vegeta_gen
from loadtest.measure import cpu, stamps
from loadtest.measure import trees as trees_mod
from loadtest.measure.profile import stages
from loadtest.measure.trees import Tree
from rig.ports import free_port

SECTION = "reserve_speed"


@dataclass(frozen=True)
class SpeedOptions:
    naive: bool = option(True, "the naive gateway in closed loop too")
    open_rounds: int = option(1, "open-loop rounds")
    duration: float = option(6.0, "seconds per measured run")
    warmup: float = option(2.0, "wrk warm-up seconds")
    fractions: str = option("0.5,0.9", "open-loop rates, of each max")
    rates: str = option("", "open-loop req/s instead of fractions")
    ceiling: bool = option(False, "each generator against nginx")
    vegeta: str = option(
        "auto", "vegeta binary beside openloop (auto: the one on PATH; empty: none)"
    )
    profile: float = option(0.0, "py-spy seconds, first tree's run")
    stamps: bool = option(False, "a stamped copy of the current code too: time per stage")

    @property
    def vegeta_bin(self) -> str:
        return (shutil.which("vegeta") or "") if self.vegeta == "auto" else self.vegeta


CONNECTIONS = 256
# Between the benchmark's range and the voucher benchmark's port (loadtest/constants.py), so a
# run beside ``python -m loadtest.bench`` does not take its ports.
PORTS = range(18300, 18390)


class Bench:
    """The trees' gateways on a port of the section's own; the sale, buyers, token files and
    shard keys are the harness's."""

    def __init__(self, h: Harness, opts: SpeedOptions) -> None:
        self.h, self.cfg, self.workdir, self.shards = h, h.cfg, h.workdir, h.shards
        self.server_core, self.load_core = h.opts.server_core, h.opts.load_core
        self.opts = opts
        self.profile_now = opts.profile > 0
        self.taken: set[int] = set()
        self.port = free_port(self.taken, PORTS)
        self.env: dict[str, str] = {}
        self.open_runs = 0

    @contextmanager
    def gateway(self, tree: Tree | None) -> Iterator[int]:
        """The tree's gateway (None: the naive one), pinned; yields its session id."""
        base = f"http://127.0.0.1:{self.port}"
        if tree is None:
            argv = servers.granian_argv("loadtest.baselines.naive_gateway:app", self.port)
            env = {**self.env, "LOADTEST_NAIVE_SHARDS": str(sale.RESERVE_SHARDS)}
            root, name = PROJECT_ROOT, "naive"
        else:
            argv = servers.gateway_argv(self.port)
            own = settings_env(gateway_port=self.port, **dict(tree.settings))
            env = {**GATEWAY_ENV, **self.env, **own}
            root, name = tree.root, tree.name
        log = self.workdir / f"{name}.log"
        # ``python -m`` puts the working directory first on sys.path: the tree's code is run.
        with process_group(servers.pinned(self.server_core, argv), log=log, env=env, cwd=root) as p:
            wait_ready(p, http_ready(f"{base}/readyz", 200), 60, name, log)
            yield p.pid

    def used(self, session: int) -> AbstractContextManager[cpu.Use]:
        """The gateway's CPU (and its threads'), the load core's and the stack's over a block."""
        return cpu.used(
            session, threads_of=session, core=self.load_core, beside=stack.pids(self.cfg)
        )

    def item(self, tree: Tree | None) -> sale.Item:
        made = self.h.made_sale()
        return made.naive if tree is None else made.gateway

    def url(self, tree: Tree | None) -> str:
        return f"http://127.0.0.1:{self.port}{self.item(tree).path}"

    def closed(self, tree: Tree | None) -> dict[str, Any]:
        o = self.opts
        with self.gateway(tree) as session:
            url = self.url(tree)
            warm = self.h.token_file("warm", 20_000)
            wrk.run(url, o.warmup, CONNECTIONS, self.load_core, (warm, 0, 20_000))
            count = 12_000 * int(o.duration) + 5_000
            token_file = self.h.token_file("closed", count)
            profile = self._profiler(session) if tree is not None and self.profile_now else None
            with self.used(session) as use:
                result = wrk.run(
                    url, o.duration, CONNECTIONS, self.load_core, (token_file, 0, count)
                )
            server_s, threads = use.of(session), use.threads
            profiled = self._profile_done(profile)
            outcomes = _outcomes(f"http://127.0.0.1:{self.port}") if tree is not None else {}
        self.shards.clear_holds(self.item(tree))
        accepted = result.requests - result.non_2xx
        return {
            "rps": result.rps,
            "p50_ms": result.p50_ms,
            "p99_ms": result.p99_ms,
            "non_2xx": result.non_2xx,
            "cpu_us_per_202": server_s / accepted * 1e6 if accepted else 0.0,
            "busy": server_s / result.duration_s,
            "load_core_busy": use.core_busy,
            "stack_us_per_202": {k: v / accepted * 1e6 for k, v in use.beside.items()}
            if accepted
            else {},
            "outcomes": outcomes,
            "threads_us_per_202": {k: v / accepted * 1e6 for k, v in threads.items()}
            if accepted
            else {},
            **({"profile": profiled} if profiled else {}),
        }

    def _profiler(self, session: int) -> subprocess.Popen[bytes] | None:
        self.profile_now = False  # once per invocation
        worker = _worker_pid(session)
        out = self.workdir / "profile.txt"
        argv = [
            str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(worker),
            "--duration", f"{self.opts.profile:g}", "--rate", "250", "--format", "raw",
            "--gil", "--output", str(out),
        ]  # fmt: skip
        return subprocess.Popen(servers.pinned(self.load_core, argv), stdout=subprocess.DEVNULL)  # noqa: S603

    def _profile_done(self, profile: subprocess.Popen[bytes] | None) -> dict[str, float] | None:
        if profile is None:
            return None
        profile.wait(60)
        out = self.workdir / "profile.txt"
        return stages(out.read_text().splitlines()) if out.exists() else None

    def open(self, tree: Tree, rates: list[float]) -> list[dict[str, Any]]:
        o = self.opts
        rows = []
        with self.gateway(tree) as session:
            url = self.url(tree)
            for rate in rates:
                tools = ["openloop", "vegeta"] if o.vegeta_bin else ["openloop"]
                self.open_runs += 1  # each instrument goes first every other time
                for tool in (
                    tools[self.open_runs % len(tools) :] + tools[: self.open_runs % len(tools)]
                ):
                    count = int(rate * (o.duration + 1)) + 1
                    token_file = self.h.token_file(f"open-{tool}", count)
                    profile = self._profiler(session) if self.profile_now else None
                    with self.used(session) as use:
                        fig, answers = self._open_tool(tool, url, rate, token_file, count)
                    fig["load_core_busy"] = use.core_busy
                    per = 1e6 / answers if answers else 0.0
                    fig["stack_us_per_answer"] = {k: v * per for k, v in use.beside.items()}
                    fig["cpu_us_per_answer"] = use.of(session) * per
                    fig["threads_us_per_answer"] = {k: v * per for k, v in use.threads.items()}
                    if (profiled := self._profile_done(profile)) is not None:
                        fig["profile"] = profiled
                    rows.append({"tree": tree.name, "tool": tool, "rate": rate, **fig})
                    print(f"[open] {tree.name} {tool} {rate:.0f}/s {_brief(fig)}", flush=True)
                    self.shards.clear_holds(self.item(tree))
        return rows

    def _open_tool(
        self, tool: str, url: str, rate: float, token_file: Path, count: int
    ) -> tuple[dict[str, Any], int]:
        """One open-loop run with ``tool``: its figures and how many requests it answered."""
        if tool == "openloop":
            m = self._openloop(url, rate, token_file)
            fig = {k: m[k] for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
            fig.update(statuses=m["statuses"], throughput_rps=m["throughput_rps"])
            fig["send_lag_p99_ms"] = m["dispatch_lag_p99_ms"]
            return fig, m["answered_total"]
        lines = token_file.read_bytes().split(b"\n")[:count]
        targets = vegeta_gen.targets(self.workdir / "targets.txt", url, lines)
        return self._vegeta(url, rate, targets), int(rate * (self.opts.duration + 1))

    def _openloop(self, url: str, rate: float, tokens: Path | None = None) -> dict[str, Any]:
        """The project's generator: 1 s of warm-up, then the run, pinned to the load core."""
        o = self.opts
        return openloop.measure(
            url, rate=rate, duration_s=o.duration, warmup_s=1, connections=CONNECTIONS,
            core=self.load_core, tokens=tokens, timeout_s=o.duration + 150,
        )  # fmt: skip

    def _vegeta(self, url: str, rate: float, targets: Path | None = None) -> dict[str, Any]:
        """vegeta, the same way: one attack of 1 s of warm-up and the run, pinned to the load
        core, at most CONNECTIONS connections; its figures."""
        binary, seconds = self.opts.vegeta_bin, self.opts.duration + 1
        results = self.workdir / "vegeta.bin"
        attack = vegeta_gen.start(
            binary, url, rate=rate, seconds=seconds, core=self.load_core,
            connections=CONNECTIONS, results=results, target_file=targets,
        )  # fmt: skip
        hits = vegeta_gen.finish(binary, attack, results, seconds + 90)
        return vegeta_gen.summary(hits, rate, int(rate))

    def ceilings(self, rate: float) -> list[dict[str, Any]]:
        """Each generator against nginx ``return 410`` at ``rate``: can it offer it?"""
        port = free_port(self.taken, PORTS)
        url = f"http://127.0.0.1:{port}/"
        argv = servers.nginx_argv(port, self.workdir / "nginx")
        rows = []
        with servers.running(
            "nginx-speed", argv, http_ready(url, 410), self.workdir, self.server_core
        ):
            m = self._openloop(url, rate)
            rows.append(_ceiling("openloop", rate, m["throughput_rps"], m["dispatch_lag_p99_ms"]))
            if self.opts.vegeta_bin:
                v = self._vegeta(url, rate)
                rows.append(_ceiling("vegeta", rate, v["throughput_rps"], v["send_lag_p99_ms"]))
        for row in rows:
            print(f"[ceiling] {row}", flush=True)
        return rows


def _ceiling(tool: str, rate: float, answered_rps: float, lag_p99_ms: float) -> dict[str, Any]:
    # Limited: it could not offer the rate, or sent late (its lag is part of its latencies).
    limited = answered_rps < 0.95 * rate or lag_p99_ms >= 1.0
    return {"tool": tool, "rate": rate, "throughput_rps": answered_rps,
            "send_lag_p99_ms": lag_p99_ms, "limited": limited}  # fmt: skip


def _brief(fig: dict[str, Any]) -> str:
    keys = ("p50_ms", "p99_ms", "p999_ms", "p50_ms_intended", "p99_ms_intended", "p999_ms_intended")
    return " ".join(f"{k} {fig[k]:.2f}" for k in keys if k in fig) + f" {fig.get('statuses')}"


def _outcomes(base: str) -> dict[str, float]:
    """The gateway's purchase outcome and guard counters (``/metrics``), the non-zero ones."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    found = re.findall(
        r'^flashsale_purchase_(?:requests|guard_hits)_total\{\w+="(\w+)"\} (\S+)$', text, re.M
    )
    return {name: float(value) for name, value in found if float(value)}


def _worker_pid(session: int) -> int:
    """The granian worker of the server whose session is ``session``: its newest process."""
    found = [pid for pid in cpu.members(session) if pid != session]
    return max(found) if found else session


def measure(ctx: Context, opts: SpeedOptions, rec: store.Recorder) -> dict[str, Any]:
    """The section: every tree of ``--compare`` (and the current code) in every round."""
    cfg, h = ctx.cfg, ctx.own_harness("reserve-speed")
    workdir, bench = h.workdir, Bench(h, opts)
    trees = [*(trees_mod.check_out(w, workdir / "trees") for w in ctx.compare), trees_mod.CURRENT]
    stamps_dir = workdir / "stamps"
    if opts.stamps:
        stamps_dir.mkdir()
        trees.append(Tree("stamped", stamps.stamp(PROJECT_ROOT, workdir / "stamped", stamps_dir)))
    subjects: list[Tree | None] = [*trees, *([None] if opts.naive else [])]
    with topics.own_topics(cfg, "speed") as env:
        bench.env = env
        try:
            with bench.gateway(trees[0]):
                h.bench_sale = sale.create(f"http://127.0.0.1:{bench.port}", cfg, hours=2)
            for r in range(ctx.args.repeats):
                for subject in store.rotate(subjects, r):
                    name = subject.name if subject else "naive"
                    rec.step(
                        f"closed {name} #{r + 1}",
                        ("closed", name, r),
                        lambda t=subject: (bench.closed(t), []),  # type: ignore[misc]
                        _brief_closed,
                    )
            medians = {
                name: found.median
                for name in {r["subject"] for r in rec.runs}
                if (found := figure(select(rec.runs, SECTION, "closed", name), "rps"))
            }
            for r in range(opts.open_rounds):
                for tree in store.rotate(trees, r):
                    top = medians.get(tree.name, 0.0)
                    fractions = floats(opts.fractions)
                    rates = floats(opts.rates) or [round(top * f, -1) for f in fractions]
                    for row in bench.open(tree, rates):
                        rec.record(
                            f"open@{row['rate']:g}", f"{tree.name}/{row['tool']}", r, row, []
                        )
            if opts.open_rounds and opts.ceiling and medians:
                top = max(
                    floats(opts.rates) or [medians[t.name] for t in trees if t.name in medians]
                )
                fraction = 1.0 if opts.rates else max(floats(opts.fractions))
                for row in bench.ceilings(round(2 * top * fraction, -1)):
                    rec.record("ceiling", row["tool"], 0, row, [])
        finally:
            h.close()
    # One file per stamped gateway process (one a run): each run's stages.
    for i, page in enumerate(sorted(stamps_dir.glob("stages-*.json"))):
        rec.record("stages", "stamped", i, stamps.summary(json.loads(page.read_text())), [])
    return {
        **dataclasses.asdict(opts),
        "vegeta": opts.vegeta_bin,
        "repeats": ctx.args.repeats,
        "trees": [
            {"name": t.name, "root": str(t.root), "settings": dict(t.settings)} for t in trees
        ],
        "compare": [f"{w.name}={w.where}" for w in ctx.compare],
        "connections": CONNECTIONS,
        "server_core": ctx.opts.server_core,
        "load_core": ctx.opts.load_core,
    }


def _latency(m: dict[str, Any], key: str) -> float:
    """The project generator's ``p99_ms``, or vegeta's from the intended send time."""
    return float(m.get(f"{key}_ms", m.get(f"{key}_ms_intended", 0.0)))


def _brief_closed(m: dict[str, Any]) -> str:
    return (
        f"{m['rps']:,.0f} req/s, {m['cpu_us_per_202']:.0f} µs/202, p99 {m['p99_ms']:.1f} ms,"
        f" non-2xx {m['non_2xx']}"
    )


# --- its part of bench.md ---------------------------------------------------------------------


def _closed_row(mine: list[Run], base: list[Run], name: str) -> list[str]:
    return [
        name,
        fmt.spread(figure(mine, "rps")),
        fmt.ratio(paired_ratio(mine, base, "rps")),
        fmt.spread(figure(mine, "cpu_us_per_202"), fmt.ms),
        fmt.spread(figure(mine, "p99_ms"), fmt.ms),
        fmt.spread(figure(mine, "load_core_busy"), fmt.pct),
    ]


def render(data: store.Section) -> list[str]:
    runs = [r for r in data["runs"] if r["metrics"]]
    s = data["settings"]
    names = [t["name"] for t in s["trees"]] + (["naive"] if s.get("naive") else [])
    closed = [r for r in runs if r["scenario"] == "closed"]
    base = names[0]

    def of(name: str) -> list[Run]:
        return select(closed, SECTION, "closed", name)

    shown = ", ".join(f"`{t['name']}` ({t['root']})" for t in s["trees"])
    out = [
        "## The reserve path, code trees side by side",
        "",
        *fmt.provenance(data),
        f"Trees: {shown}; every round runs"
        f" each once, in rotated order, one gateway worker on core {s.get('server_core', 0)}, wrk"
        f" ({s['connections']} connections, a fresh buyer per request: every answer a 202) on"
        f" core {s.get('load_core', 1)}. Ratios are paired per round against `{base}`.",
        "",
        *fmt.table(
            ["tree", "closed req/s", f"÷ {base}", "CPU µs per 202", "p99 ms", "load core busy"],
            [_closed_row(of(name), of(base), name) for name in names],
        ),
    ]
    opened = [r for r in runs if r["scenario"].startswith("open@")]
    if opened:
        out += [
            "Open loop at fixed rates, each tree by the project's generator"
            + (" and vegeta" if s.get("vegeta") else "")
            + " (latency from each request's intended send time; vegeta's also from its send):",
            "",
            *fmt.table(
                ["tree / tool", "offered req/s", "p50 ms", "p99 ms", "p99.9 ms", "answers/s",
                 "CPU µs per answer"],
                [
                    [
                        r["subject"], fmt.rate(r["metrics"]["rate"]),
                        *(fmt.ms(_latency(r["metrics"], k)) for k in ("p50", "p99", "p999")),
                        fmt.rate(r["metrics"]["throughput_rps"]),
                        fmt.ms(r["metrics"]["cpu_us_per_answer"]),
                    ]
                    for r in opened
                ],
            ),
        ]  # fmt: skip
    ceilings = [r for r in runs if r["scenario"] == "ceiling"]
    if ceilings:
        out += [
            "Each generator against nginx `return 410` at 2× the highest offered rate:",
            "",
            *fmt.table(
                ["generator", "offered req/s", "answered req/s", "send lag p99 ms"],
                [
                    [r["subject"], *(fmt.rate(r["metrics"][k]) for k in ("rate", "throughput_rps")),
                     fmt.ms(r["metrics"]["send_lag_p99_ms"])]
                    for r in ceilings
                ],
            ),
        ]  # fmt: skip
    staged = [r["metrics"] for r in runs if r["scenario"] == "stages"]
    if staged:
        out += [
            "Time per stage of one 202 in the stamped copy (its own stamps cost CPU: time only):"
        ]
        out += [""]
        out += fmt.table(
            ["stage", "n", "mean ms", "p50 ms", "p90 ms", "p99 ms"],
            [
                [
                    stage,
                    fmt.count(f["n"]),
                    *(fmt.ms(f[k]) for k in ("mean_ms", "p50_ms", "p90_ms", "p99_ms")),
                ]
                for stage, f in staged[-1].items()
            ],
        )
    profiles = [r["metrics"]["profile"] for r in runs if "profile" in r["metrics"]]
    if profiles:
        out += ["Where one 202's CPU went (py-spy samples of the first tree's worker):", ""]
        out += fmt.table(["stage", "share"], [[k, fmt.pct(v)] for k, v in profiles[0].items()])
    return [*out, ""]
