"""``python -m loadtest.bench.reserve_speed``: the reserve path of code trees side by side.

Each tree (``--tree NAME=DIR``, a copy of the project: e.g. the committed code and the work tree)
serves one gateway worker pinned to the server core, the load generator runs on the other core;
the trees alternate within every round (rotated order), so both see the same machine. The
shared stack is left where the scheduler puts it (other people use it: nothing is re-pinned).

- closed loop: wrk, 256 connections, a fresh buyer token per request (every answer a 202):
  req/s and the gateway's CPU µs per 202 at saturation; the naive gateway beside them;
- open loop at fractions of each tree's own median closed-loop rate, by two instruments on the
  same gateway process: the project's generator (``loadtest.generators.openloop``) and vegeta
  (``--vegeta``: a targets file with one buyer token per request), whose latencies are given
  both as vegeta reports them (from the moment it sent) and from each request's intended send
  time (``seq / rate``, as the project's generator measures);
- each generator's ceiling against nginx ``return 410`` at 2x the highest offered rate;
- ``--profile S``: a py-spy sampling profile of the first tree's worker under closed-loop load,
  its samples bucketed into the stages of one 202 (``stages``).

Prints one ``RESERVE_SPEED_JSON`` line (and writes ``--json``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from flashsale import stack
from flashsale.stack.processes import http_ready, process_group, settings_env, wait_ready
from kernel.settings import PROJECT_ROOT, Settings, settings
from loadtest.bench import sale, servers, topics
from loadtest.bench.harness import GATEWAY_ENV
from loadtest.constants import REPORTS_DIR
from loadtest.generators import openloop, tokens, wrk
from loadtest.generators import vegeta as vegeta_gen
from loadtest.measure import cpu
from rig.ports import free_port

SUMMARY_PREFIX = "RESERVE_SPEED_JSON "
CONNECTIONS = 256
# Between the benchmark's range and the voucher benchmark's port (loadtest/constants.py), so a
# run beside ``python -m loadtest.bench`` does not take its ports.
PORTS = range(18300, 18390)
SERVER_CORE, LOAD_CORE = 0, 1

# Stages of one 202, by the first frame (from the leaf up) whose function or file matches; the
# rest is the event loop, the HTTP server and the interpreter ("other").
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("metrics", ("hot_counters.py", "gateway/metrics.py", "RouteStats.observe")),
    ("token verification", ("gateway/auth.py", "gateway/hs256.py", "gateway/tokens.py")),
    ("order id + event encoding", ("kernel/ids.py", "kernel/events.py", "payload_for")),
    ("kafka: produce", ("OrderProducer.send",)),
    ("kafka: delivery poll + reports", ("gateway/producer.py",)),
    ("outbox ack", ("gateway/acks.py", "ack_outbox")),
    ("redis: queue a call", ("AutoPipeline._queue", "AutoPipeline.call", "AutoPipeline.node_of")),
    ("redis: pack + write a batch", ("AutoPipeline._flush", "AutoPipeline._send", "NodeLink.send")),
    ("redis: read + settle replies", ("NodeLink.data_received", "AutoPipeline._answered")),
    ("redis: router + reserver coroutines", ("shard_router/",)),
    ("response: ASGI send (into granian)", ("capture",)),
    ("response: build", ("gateway/responses.py",)),
    ("periodic tasks", ("kernel/periodic.py", "catalog.py", "gateway/outbox.py", "admission.py")),
    ("purchase handler (own code)", ("gateway/purchase.py", "gateway/handoff.py", "items.py")),
    ("app front + route stats", ("gateway/front.py", "gateway/asgi.py", "gateway/observed.py")),
    ("granian's Python glue", ("granian/_futures.py", "granian/asgi.py")),
    ("event loop (uvloop run, callbacks)", ("_spawn_asgi_lifespan_worker", "uvloop", "asyncio/")),
)


@dataclass(frozen=True, slots=True)
class Tree:
    name: str
    root: Path
    settings: tuple[tuple[str, str], ...] = ()  # Settings fields given to its gateway


def parse_tree(text: str) -> Tree:
    """``NAME=DIR`` or ``NAME=DIR,field=value,...`` (fields of Settings for its gateway)."""
    name, sep, rest = text.partition("=")
    root, *fields = rest.split(",")
    pairs = tuple(tuple(f.split("=", 1)) for f in fields)
    if not sep or not name or not Path(root).is_dir() or any(len(p) != 2 for p in pairs):
        raise argparse.ArgumentTypeError(f"--tree NAME=DIR[,field=value...]: {text!r}")
    return Tree(name, Path(root).resolve(), pairs)  # type: ignore[arg-type]


def stages(collapsed: Iterable[str]) -> dict[str, float]:
    """py-spy's ``--format raw`` lines (``frame;frame;... count``, root first) as each stage's
    share of the samples."""
    counts: Counter[str] = Counter()
    for line in collapsed:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit() or count == "0":
            continue
        counts[_stage(stack.split(";"))] += int(count)
    total = sum(counts.values())
    return {stage: n / total for stage, n in counts.most_common()} if total else {}


def _stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return "other"


def vegeta(
    binary: str,
    workdir: Path,
    targets: Path | None,
    url: str,
    rate: float,
    seconds: float,
    warmup_s: float,
) -> dict[str, Any]:
    """One vegeta attack pinned to the load core, at most CONNECTIONS connections."""
    results = workdir / "vegeta.bin"
    attack = vegeta_gen.start(
        binary, url, rate=rate, seconds=seconds + warmup_s, core=LOAD_CORE,
        connections=CONNECTIONS, results=results, target_file=targets,
    )  # fmt: skip
    hits = vegeta_gen.finish(binary, attack, results, seconds + warmup_s + 90)
    return vegeta_gen.summary(hits, rate, int(rate * warmup_s))


class Bench:
    def __init__(self, cfg: Settings, opts: argparse.Namespace, workdir: Path) -> None:
        self.cfg = cfg
        self.opts = opts
        self.workdir = workdir
        self.buyers = tokens.BuyerIds()
        self.taken: set[int] = set()
        self.port = free_port(self.taken, PORTS)
        self.shards = sale.Shards(cfg)
        self.env: dict[str, str] = {}
        self.made: sale.BenchSale | None = None
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
        with process_group(servers.pinned(SERVER_CORE, argv), log=log, env=env, cwd=root) as p:
            wait_ready(p, http_ready(f"{base}/readyz", 200), 60, name, log)
            yield p.pid

    def used(self, session: int) -> AbstractContextManager[cpu.Use]:
        """The gateway's CPU (and its threads'), the load core's and the stack's over a block."""
        return cpu.used(session, threads_of=session, core=LOAD_CORE, beside=stack.pids(self.cfg))

    def item(self, tree: Tree | None) -> sale.Item:
        assert self.made is not None
        return self.made.naive if tree is None else self.made.gateway

    def url(self, tree: Tree | None) -> str:
        return f"http://127.0.0.1:{self.port}{self.item(tree).path}"

    def token_file(self, name: str, count: int) -> Path:
        return tokens.write(self.cfg, self.workdir / f"{name}.tokens", self.buyers.take(count))

    def closed(self, tree: Tree | None) -> dict[str, Any]:
        o = self.opts
        with self.gateway(tree) as session:
            url = self.url(tree)
            warm = self.token_file("warm", 20_000)
            wrk.run(url, o.warmup, CONNECTIONS, LOAD_CORE, (warm, 0, 20_000))
            count = 12_000 * int(o.duration) + 5_000
            token_file = self.token_file("closed", count)
            profile = self._profiler(session) if tree is not None and o.profile_now else None
            with self.used(session) as use:
                result = wrk.run(url, o.duration, CONNECTIONS, LOAD_CORE, (token_file, 0, count))
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
        self.opts.profile_now = False  # once per invocation
        worker = _worker_pid(session)
        out = self.workdir / "profile.txt"
        argv = [
            str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(worker),
            "--duration", f"{self.opts.profile:g}", "--rate", "250", "--format", "raw",
            "--gil", "--output", str(out),
        ]  # fmt: skip
        return subprocess.Popen(servers.pinned(LOAD_CORE, argv), stdout=subprocess.DEVNULL)  # noqa: S603

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
                tools = ["openloop", "vegeta"] if o.vegeta else ["openloop"]
                self.open_runs += 1  # each instrument goes first every other time
                for tool in (
                    tools[self.open_runs % len(tools) :] + tools[: self.open_runs % len(tools)]
                ):
                    count = int(rate * (o.duration + 1)) + 1
                    token_file = self.token_file(f"open-{tool}", count)
                    profile = self._profiler(session) if o.profile_now else None
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
        o = self.opts
        if tool == "openloop":
            m = openloop.measure(
                url, rate=rate, duration_s=o.duration, warmup_s=1,
                connections=CONNECTIONS, core=LOAD_CORE, tokens=token_file,
                timeout_s=o.duration + 150,
            )  # fmt: skip
            fig = {k: m[k] for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
            fig.update(statuses=m["statuses"], throughput_rps=m["throughput_rps"])
            fig["send_lag_p99_ms"] = m["dispatch_lag_p99_ms"]
            answers = m["answered_total"]
        else:
            lines = token_file.read_bytes().split(b"\n")[:count]
            targets = vegeta_gen.targets(self.workdir / "targets.txt", url, lines)
            fig = vegeta(o.vegeta, self.workdir, targets, url, rate, o.duration, 1)
            answers = int(rate * (o.duration + 1))
        return fig, answers

    def ceilings(self, rate: float) -> list[dict[str, Any]]:
        """Each generator against nginx ``return 410`` at ``rate``: can it offer it?"""
        port = free_port(self.taken, PORTS)
        url = f"http://127.0.0.1:{port}/"
        argv = servers.nginx_argv(port, self.workdir / "nginx")
        rows = []
        with servers.running("nginx-speed", argv, http_ready(url, 410), self.workdir, SERVER_CORE):
            m = openloop.measure(
                url, rate=rate, duration_s=self.opts.duration, warmup_s=1,
                connections=CONNECTIONS, core=LOAD_CORE, timeout_s=self.opts.duration + 150,
            )  # fmt: skip
            rows.append(_ceiling("openloop", rate, m["throughput_rps"], m["dispatch_lag_p99_ms"]))
            if self.opts.vegeta:
                v = vegeta(self.opts.vegeta, self.workdir, None, url, rate, self.opts.duration, 1)
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


def run(cfg: Settings, opts: argparse.Namespace) -> dict[str, Any]:
    workdir = REPORTS_DIR / "reserve-speed"
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(cfg, opts, workdir)
    opts.profile_now = opts.profile > 0
    trees: list[Tree] = opts.tree or [Tree("current", PROJECT_ROOT)]
    subjects: list[Tree | None] = [*trees, *([None] if opts.naive else [])]
    closed: dict[str, list[dict[str, Any]]] = {t.name if t else "naive": [] for t in subjects}
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    with topics.own_topics(cfg, "speed") as env:
        bench.env = env
        try:
            with bench.gateway(trees[0]):
                bench.made = sale.create(f"http://127.0.0.1:{bench.port}", cfg, hours=2)
            for r in range(opts.rounds):
                order = subjects[r % len(subjects) :] + subjects[: r % len(subjects)]
                for subject in order:
                    m = bench.closed(subject)
                    name = subject.name if subject else "naive"
                    closed[name].append(m)
                    print(f"[closed] round {r + 1} {name}: {m['rps']:,.0f} req/s "
                          f"{m['cpu_us_per_202']:.0f} µs/202 p99 {m['p99_ms']:.1f} ms "
                          f"non-2xx {m['non_2xx']}", flush=True)  # fmt: skip
            out["closed"] = closed
            out["closed_median_rps"] = {
                name: statistics.median(m["rps"] for m in runs)
                for name, runs in closed.items()
                if runs
            }
            out["open"] = []
            for r in range(opts.open_rounds):
                for tree in trees[r % len(trees) :] + trees[: r % len(trees)]:
                    top = out["closed_median_rps"].get(tree.name, 0.0)
                    rates = opts.rates or [round(top * f, -1) for f in opts.fractions]
                    out["open"] += bench.open(tree, rates)
            if opts.open_rounds and opts.ceiling:
                top = max(opts.rates or [out["closed_median_rps"][t.name] for t in trees])
                fraction = 1.0 if opts.rates else max(opts.fractions)
                out["ceilings"] = bench.ceilings(round(2 * top * fraction, -1))
        finally:
            if bench.made is not None:
                for item in bench.made.items:
                    bench.shards.drop(item)
            bench.shards.close()
    return out


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.reserve_speed", description=__doc__
    )
    parser.add_argument("--tree", type=parse_tree, action="append", help="NAME=DIR, repeatable")
    parser.add_argument("--naive", action="store_true", help="the naive gateway in closed loop")
    parser.add_argument("--rounds", type=int, default=3, help="closed-loop rounds")
    parser.add_argument("--open-rounds", type=int, default=1)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument(
        "--fractions", type=_floats, default=[0.5, 0.9], help="open-loop rates, of each max"
    )
    parser.add_argument("--rates", type=_floats, default=[], help="open-loop req/s instead")
    parser.add_argument("--ceiling", action="store_true", help="generators against nginx")
    parser.add_argument("--vegeta", default=shutil.which("vegeta") or "", help="vegeta binary")
    parser.add_argument("--profile", type=float, default=0.0, help="py-spy seconds, first run")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    result = run(settings(), opts)
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1))
    print(SUMMARY_PREFIX + json.dumps(result))


if __name__ == "__main__":
    main()
