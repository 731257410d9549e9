"""One measured run per call: start the subject's server pinned, load it, check what it answered,
stop it, return ``(metrics, problems)``. ``loadtest.bench.phases`` decides which runs, in which
order.

With ``workers=1`` the server runs on the server core and the load on the load core. With more
workers the server gets every core and so does wrk (one thread per worker): the load generator
competes with the server, as it does on any 2-core machine, and the figures say how much."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis import Redis

from flashsale.fleet import haproxy
from flashsale.fleet.haproxy import Edge
from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from loadtest.bench import affinity, redisbench, sale, servers, topics
from loadtest.constants import BENCH_PORTS
from loadtest.generators import openloop, tokens, wrk
from loadtest.measure.cpu import Use, used
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS

Measured = tuple[dict[str, Any], list[str]]

# The sold-out flag outlives every run: a tokenless request never falls through to the token
# checks when the default 1 s flag expires.
GATEWAY_ENV = settings_env(**LIFTED_IP_LIMITS, sold_out_flag_ttl_ms=86_400_000)
WARMUP_TOKENS = 20_000


@dataclass
class Options:
    duration_s: float
    warmup_s: float
    soldout_connections: int
    reserve_connections: int
    open_connections: int
    open_warmup_s: float
    redis_clients: int
    redis_calls: dict[int, int]
    server_core: int = 0
    load_core: int = 1
    all_cores: str = "0,1"
    # Where a one-worker server's stack runs: the load core (the server's core its own), or
    # the server core (the system under test on one core, the generator alone on the other).
    stack_core: int | None = None


@dataclass(frozen=True)
class Served:
    base: str
    pid: int  # also its session id: the server was started in a session of its own

    def cpu(self) -> contextlib.AbstractContextManager[Use]:
        """The server's CPU over the block, and the machine's."""
        return used(self.pid)


@dataclass
class Harness:
    cfg: Settings
    opts: Options
    workdir: Path
    log_dir: Path
    ports: dict[str, int] = field(default_factory=dict)
    buyers: tokens.BuyerIds = field(default_factory=tokens.BuyerIds)
    bench_sale: sale.BenchSale | None = None
    shards: sale.Shards = field(init=False)
    closed: bool = field(default=False, init=False)
    _topics: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _topic_env: dict[str, str] | None = None

    def __post_init__(self) -> None:
        taken: set[int] = set()
        for name in ("gateway", "bare_asgi", "nginx", "naive", "redis"):
            self.ports[name] = free_port(taken, BENCH_PORTS)
        self.shards = sale.Shards(self.cfg)

    # --- servers ---------------------------------------------------------------------------

    def base(self, subject: str) -> str:
        return f"http://127.0.0.1:{self.ports[subject]}"

    def cores(self, workers: int) -> tuple[int | str, int | str]:
        """(server cores, load cores): apart for one worker, shared for more."""
        if workers == 1:
            return self.opts.server_core, self.opts.load_core
        return self.opts.all_cores, self.opts.all_cores

    @contextmanager
    def server(
        self, subject: str, workers: int = 1, env: Mapping[str, str] | None = None
    ) -> Iterator[Served]:
        """The subject's server for the block, pinned; ``env`` on top of its own settings."""
        own: dict[str, str]
        port, base, core = self.ports[subject], self.base(subject), self.cores(workers)[0]
        if self._topic_env is None:
            # The gateways' orders go to a topic of the benchmark's own (see topics.py).
            self._topic_env = self._topics.enter_context(topics.own_topics(self.cfg, "http"))
        if subject == "gateway":
            argv = servers.gateway_argv(port, workers)
            ready = servers.http_ready(f"{base}/readyz", 200)
            own = {**GATEWAY_ENV, **self._topic_env, **settings_env(gateway_port=port)}
        elif subject == "bare_asgi":
            argv = servers.granian_argv("loadtest.baselines.bare_asgi:app", port)
            ready, own = servers.http_ready(f"{base}/", 410), {}
        elif subject == "naive":
            argv = servers.granian_argv("loadtest.baselines.naive_gateway:app", port)
            ready = servers.http_ready(f"{base}/readyz", 200)
            own = {**self._topic_env, "LOADTEST_NAIVE_SHARDS": str(sale.RESERVE_SHARDS)}
        elif subject == "nginx":
            argv = servers.nginx_argv(port, self.workdir / "nginx")
            ready, own = servers.http_ready(f"{base}/", 410), {}
        else:
            raise ValueError(subject)
        with contextlib.ExitStack() as pinned:
            if workers == 1:
                # The server's core is the server's alone: the stack runs beside the load.
                stack_core = self.opts.stack_core
                stack_core = self.opts.load_core if stack_core is None else stack_core
                pinned.enter_context(affinity.stack_on(self.cfg, {stack_core}))
            proc = pinned.enter_context(
                servers.running(subject, argv, ready, self.log_dir, core, {**own, **(env or {})})
            )
            yield Served(base, proc.pid)

    @contextmanager
    def entry(
        self, served: Served, edge: Edge | None, core: int | None = None, name: str = "haproxy"
    ) -> Iterator[tuple[str, haproxy.Balancer | None]]:
        """Where the load goes: (base URL, the balancer or None). ``edge`` None: the gateway
        itself; else haproxy (the fleet's configuration) in front of it, pinned to ``core``
        (default: the server core, with the gateway), its files and log under ``name``."""
        if edge is None:
            yield served.base, None
            return
        port = free_port(set(self.ports.values()), BENCH_PORTS)
        gateway = served.base.removeprefix("http://")
        prefix = servers.pinned(self.opts.server_core if core is None else core, [])
        log = self.log_dir / f"{name}.log"
        where = self.workdir / f"{name}-{port}"
        with haproxy.serving(gateway, port, where, edge, prefix, log) as balancer:
            yield balancer.base, balancer

    def set_up_sale(self) -> sale.BenchSale:
        """Create the benchmark's sale through a gateway and sell the sold-out item's one unit."""
        with self.server("gateway") as served:
            base = served.base
            made = sale.create(base, self.cfg, hours=2)
            status = sale.purchase(base, made.sold_out, self.token())
            if status != 202:
                for item in made.items:
                    self.shards.drop(item)
                raise RuntimeError(f"buying the sold-out item's only unit answered {status}")
        self.bench_sale = made
        return made

    def token(self) -> bytes:
        return next(tokens.signed(self.cfg, self.buyers.take(1)))

    def token_file(self, name: str, count: int) -> Path:
        return tokens.write(self.cfg, self.workdir / f"{name}.tokens", self.buyers.take(count))

    # --- scenarios -------------------------------------------------------------------------

    def closed_sold_out(
        self, subject: str, workers: int = 1, env: Mapping[str, str] | None = None
    ) -> Measured:
        s = self.made_sale()
        o = self.opts
        load_core = self.cores(workers)[1]
        with self.server(subject, workers, env) as served:
            base = served.base
            problems = self._flag_sold_out(subject, base, workers)
            url = base + s.sold_out.path
            wrk.run(url, o.warmup_s, o.soldout_connections, load_core, threads=workers)
            before = sale.metric(base, "sold_out_flag") if subject == "gateway" else 0.0
            with served.cpu() as use:
                result = wrk.run(
                    url, o.duration_s, o.soldout_connections, load_core, threads=workers
                )
            metrics: dict[str, Any] = {**_wrk_figures(result), **use.figures(result.requests)}
            metrics["workers"] = workers
            if subject == "gateway" and workers == 1:
                # /metrics is per process: with more workers it shows one worker's count only.
                metrics["flag_hits"] = sale.metric(base, "sold_out_flag") - before
                if metrics["flag_hits"] < result.requests:
                    hits = metrics["flag_hits"]
                    problems.append(f"{hits:.0f} of {result.requests} answered from the flag")
            problems += _probe(base + s.sold_out.path, 410, "after the run", 2 * workers)
        problems += wrk_problems(result, expect_2xx=False)
        return metrics, problems

    def closed_reserve(
        self, subject: str, workers: int = 1, env: Mapping[str, str] | None = None
    ) -> Measured:
        item = self._item(subject)
        o = self.opts
        load_core = self.cores(workers)[1]
        with self.server(subject, workers, env) as served:
            url = served.base + item.path

            def load(seconds: float, token_file: Path, count: int) -> wrk.WrkResult:
                tokens = (token_file, 0, count)
                return wrk.run(url, seconds, o.reserve_connections, load_core, tokens, workers)

            warm = load(o.warmup_s, self.token_file("warmup", WARMUP_TOKENS), WARMUP_TOKENS)
            # Enough fresh buyers for 1.5x the warm-up's pace, so no token is used twice.
            count = int(warm.rps * o.duration_s * 1.5) + 5_000
            token_file = self.token_file(f"{subject}-closed", count)
            before = self.shards.reserved(item)
            with served.cpu() as use:
                result = load(o.duration_s, token_file, count)
        metrics: dict[str, Any] = {**_wrk_figures(result), **use.figures(result.requests)}
        metrics["workers"] = workers
        metrics["tokens"] = count
        metrics["reserved"] = self.shards.reserved(item) - before
        problems = wrk_problems(result, expect_2xx=True)
        if result.requests > count:
            problems.append(f"{result.requests} requests for {count} tokens: buyers repeated")
        if metrics["reserved"] < result.requests - result.non_2xx:
            problems.append(f"{metrics['reserved']} reserved in Redis for {result.requests} 202s")
        self.shards.clear_holds(item)
        return metrics, problems

    def open_sold_out(self, subject: str, rate: float) -> Measured:
        s = self.made_sale()
        with self.server(subject) as served:
            base = served.base
            problems = self._flag_sold_out(subject, base, 1)
            before = sale.metric(base, "sold_out_flag") if subject == "gateway" else 0.0
            metrics = self.open_loop(served, base + s.sold_out.path, rate, None)
            if subject == "gateway":
                metrics["flag_hits"] = sale.metric(base, "sold_out_flag") - before
                if metrics["flag_hits"] < metrics["answered_total"]:
                    problems.append("not every request was answered from the flag")
        problems += _open_problems(metrics, "410")
        return metrics, problems

    def open_reserve(self, subject: str, rate: float) -> Measured:
        item = self._item(subject)
        count = int(rate * (self.opts.open_warmup_s + self.opts.duration_s)) + 1
        with self.server(subject) as served:
            token_file = self.token_file(f"{subject}-open", count)
            before = self.shards.reserved(item)
            metrics = self.open_loop(served, served.base + item.path, rate, token_file)
        metrics["reserved"] = self.shards.reserved(item) - before
        problems = _open_problems(metrics, "202")
        self.shards.clear_holds(item)
        return metrics, problems

    def redis(self, node: redisbench.Node, pipeline: int) -> Measured:
        calls = self.opts.redis_calls[pipeline]
        result = redisbench.run(node, pipeline, calls, self.opts.redis_clients, self.opts.load_core)
        problems = []
        if result["reserved"] < calls * 0.99:
            problems.append(f"only {result['reserved']} of {calls} calls reserved")
        return result, problems

    @contextmanager
    def standalone_redis(self) -> Iterator[redisbench.Node]:
        port = self.ports["redis"]
        workdir = self.workdir / "redis"
        workdir.mkdir(exist_ok=True)

        def ready() -> bool:
            try:
                with Redis(port=port, socket_timeout=1) as client:
                    return bool(client.ping())
            except Exception:  # noqa: BLE001 - not up yet
                return False

        argv = servers.redis_argv(port, workdir)
        with servers.running("redis", argv, ready, self.log_dir, self.opts.server_core):
            yield redisbench.Node(
                f"standalone :{port} (pinned, no persistence)", port, cluster=False
            )

    # --- helpers ---------------------------------------------------------------------------

    def made_sale(self) -> sale.BenchSale:
        if self.bench_sale is None:
            raise RuntimeError("set_up_sale() first")
        return self.bench_sale

    def _item(self, subject: str) -> sale.Item:
        return self.made_sale().gateway if subject == "gateway" else self.made_sale().naive

    def _flag_sold_out(self, subject: str, base: str, workers: int) -> list[str]:
        """A fresh gateway learns the item is sold out from a purchase that reaches Redis (and
        tells its other workers); a few purchases, so every worker has been told or has asked."""
        s = self.made_sale()
        if subject == "gateway":
            for _ in range(2 * workers - 1):
                status = sale.purchase(base, s.sold_out, self.token())
                if status != 410:
                    return [f"the flagging purchase answered {status}, not 410"]
        return _probe(base + s.sold_out.path, 410, "before the run", 2 * workers)

    def open_loop(
        self, served: Served, url: str, rate: float, token_file: Path | None
    ) -> dict[str, Any]:
        """An open-loop run at ``rate``, with the server's CPU over it per answered request."""
        o = self.opts
        with served.cpu() as use:
            metrics = openloop.measure(
                url,
                rate=rate,
                duration_s=o.duration_s,
                warmup_s=o.open_warmup_s,
                connections=o.open_connections,
                core=o.load_core,
                tokens=token_file,
                timeout_s=o.duration_s + o.open_warmup_s + 120,
            )
        metrics.update(use.figures(metrics["answered_total"], metrics["elapsed_s"]))
        return metrics

    def close(self) -> None:
        """Delete every key of the benchmark's items and its topics (the stack is shared)."""
        self._topics.close()
        if self.closed:
            return
        if self.bench_sale is not None:
            for item in self.bench_sale.items:
                self.shards.drop(item)
        self.shards.close()
        self.closed = True


def _probe(url: str, expected: int, when: str, times: int = 1) -> list[str]:
    """Tokenless purchases, each on a new connection (so, with several workers, on several)."""
    for _ in range(times):
        status = httpx.post(url, timeout=10).status_code
        if status != expected:
            return [f"a tokenless purchase {when} answered {status}"]
    return []


def _wrk_figures(result: wrk.WrkResult) -> dict[str, Any]:
    figures = result.as_dict()
    figures["loadgen_cpu_us_per_req"] = (
        result.cpu_s / result.requests * 1e6 if result.requests else 0
    )
    return figures


def wrk_problems(result: wrk.WrkResult, expect_2xx: bool) -> list[str]:
    problems = []
    if expect_2xx and result.non_2xx:
        problems.append(f"{result.non_2xx} of {result.requests} answers were not 2xx")
    if not expect_2xx and result.non_2xx != result.requests:
        problems.append(f"{result.requests - result.non_2xx} answers were 2xx, expected 410s")
    if result.socket_errors or result.timeouts:
        problems.append(f"{result.socket_errors} socket errors, {result.timeouts} timeouts")
    return problems


def _open_problems(metrics: dict[str, Any], expected: str) -> list[str]:
    problems = []
    other = {k: v for k, v in metrics["statuses"].items() if k != expected}
    if other:
        problems.append(f"answers other than {expected}: {other}")
    if metrics["unanswered"] or metrics["errors"]:
        problems.append(
            f"{metrics['unanswered']} unanswered, {metrics['errors']} connection errors"
        )
    return problems
