"""Redis Cluster failover against its settings: how long a shard cannot take a write after its
primary is SIGKILLed, and whether a primary paused like a long GC (SIGSTOP 1 s, 2 s) is failed
over for nothing, per ``cluster-node-timeout`` and ``cluster-replica-validity-factor``.

Each configuration gets a throwaway cluster of its own (``rig.cluster``: 3 primaries + 3
replicas, started by the stack's own code in a temporary state directory), never the stack's.
Per kill it measures, from the SIGKILL:

- promoted: the victim's replica accepts a write (a SET straight to it, every 10 ms);
- router: the stack's ShardRouter reserves on the victim's shard again (what a buyer sees: 503
  until then), while buyers of the other primaries' shards keep reserving (their failures count).

The ``failover`` section (``--failover-*`` options): a config is
node-timeout-ms[/validity-factor][+watch]; +watch runs jobs/redis_failover.py beside it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from flashsale.stack.redis_cluster import RedisCluster, replication_info
from jobs.redis_failover import FailoverWatch
from kernel.settings import Settings
from kernel.waiting import wait_until, wait_until_async
from loadtest.bench import results as store
from loadtest.bench.context import Context, option
from loadtest.bench.report import fmt
from rig.cluster import NODES, node_pid, replica_of, throwaway_cluster
from shard_router import Outcome, ShardRouter, ShardUnavailable

SHARDS = 6
POLL_S = 0.01
GIVE_UP_S = 60.0


@dataclass(frozen=True, slots=True)
class Config:
    node_timeout_ms: int
    validity_factor: int
    watched: bool = False  # the failover watch runs beside the cluster (jobs/redis_failover.py)

    @classmethod
    def parse(cls, text: str) -> Config:
        text, plus, watch = text.partition("+")
        if plus and watch != "watch":
            raise ValueError(f"{text}+{watch}: the only suffix is +watch")
        timeout, _, factor = text.partition("/")
        return cls(int(timeout), int(factor or 10), watched=bool(plus))


@dataclass(slots=True)
class Row:
    config: Config
    promoted_s: list[float] = field(default_factory=list)
    router_s: list[float] = field(default_factory=list)
    other_failures: int = 0  # reserves on the other primaries' shards that failed meanwhile
    failovers_1s: list[bool] = field(default_factory=list)
    failovers_2s: list[bool] = field(default_factory=list)


async def _seconds_until(check: Callable[[], Awaitable[bool]], deadline: float) -> float:
    """Seconds from now until ``await check()`` is true (``inf`` past the deadline)."""
    started = time.monotonic()
    if await wait_until_async(check, deadline - started, POLL_S):
        return time.monotonic() - started
    return float("inf")


class Shards:
    """One item over 6 shards on the throwaway cluster, and a buyer per call."""

    def __init__(self, router: ShardRouter) -> None:
        self.router = router
        self.item = uuid.uuid4().int % 10**9 * 1000 + 9 * 10**12
        self._buyers = iter(range(SHARDS, 10**9))

    async def load(self) -> None:
        for k in range(SHARDS):
            await self.router.load_shard(self.item, k, 10**6, [], [])

    def node(self, shard: int) -> str:
        return self.router.pipeline.node_of(f"{{item:{self.item}:{shard}}}:stock")

    async def buy(self, shard: int) -> bool:
        user = next(self._buyers) * SHARDS + shard  # homed on ``shard``
        try:
            res = await self.router.reserve(self.item, SHARDS, user, str(uuid.uuid4()), _payload)
        except ShardUnavailable:
            return False
        return res.outcome is Outcome.RESERVED


def _payload(_shard: int) -> bytes:
    return b"failover-bench"


async def _kill_once(cfg: Settings, row: Row) -> None:
    router = ShardRouter(cfg)
    await router.start()
    try:
        shards = Shards(router)
        await shards.load()
        victim = shards.node(0)
        others = [k for k in range(1, SHARDS) if shards.node(k) != victim]
        host, port = replica_of(cfg, victim).rsplit(":", 1)
        replica = Redis(host=host, port=int(port), socket_timeout=1)
        assert await shards.buy(0)
        stop = asyncio.Event()

        async def other_buyers() -> None:
            while not stop.is_set():
                for k in others:
                    row.other_failures += not await shards.buy(k)
                await asyncio.sleep(POLL_S)

        async def writable() -> bool:
            try:
                return bool(await replica.set(f"{{item:{shards.item}:0}}:probe", b"1"))
            except Exception:  # noqa: BLE001 - MOVED or READONLY until it is promoted
                return False

        async def sells() -> bool:
            return await shards.buy(0)

        meanwhile = asyncio.create_task(other_buyers())
        os.kill(node_pid(cfg, victim), signal.SIGKILL)
        deadline = time.monotonic() + GIVE_UP_S
        routed_task = asyncio.create_task(_seconds_until(sells, deadline))
        promoted = await _seconds_until(writable, deadline)
        if cfg.redis_wait_replicas:
            # The promoted primary has no replica to confirm a WAIT until the victim is back:
            # restart it at once, as a supervisor would.
            await asyncio.to_thread(RedisCluster(cfg).up)
        routed = await routed_task
        stop.set()
        await meanwhile
        await replica.aclose()
        row.promoted_s.append(promoted)
        row.router_s.append(routed)
    finally:
        await router.close()
    await asyncio.to_thread(RedisCluster(cfg).up)  # the victim rejoins, as a replica


def _paused_fails_over(cfg: Settings, pause_s: float) -> bool:
    """SIGSTOP a primary for ``pause_s``, SIGCONT it, and watch whether its replica took over
    (for 3 node timeouts after: a failover decided during the pause completes after it)."""
    primary = RedisCluster(cfg).primaries()[0]
    replica = replica_of(cfg, primary)
    pid = node_pid(cfg, primary)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(pause_s)  # the fault itself is a pause of this length
    finally:
        os.kill(pid, signal.SIGCONT)
    watch_s = max(3 * cfg.redis_node_timeout_ms / 1000, 3.0)
    if wait_until(lambda: replication_info(replica).get("role") == "master", watch_s, 0.05):
        RedisCluster(cfg).up()  # settled: the old primary is the replica now
        return True
    return False


@contextmanager
def watching(cfg: Settings, on: bool) -> Iterator[None]:
    """The failover watch on its own thread and loop for the block (the pauses are measured
    with blocking sleeps)."""
    if not on:
        yield
        return
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(FailoverWatch(cfg).run(stop),), daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=5)
        loop.close()


def measure(base: Settings, config: Config, kills: int, pauses: int, port: int) -> Row:
    row = Row(config)
    cluster = throwaway_cluster(
        base,
        node_timeout_ms=config.node_timeout_ms,
        validity_factor=config.validity_factor,
        ports=range(port, port + NODES),
    )
    with cluster as cfg, watching(cfg, config.watched):
        print(
            f"  {cfg.state_dir}: router WAITs for {cfg.redis_wait_replicas} replica(s),"
            f" breaker cooldown {cfg.shard_breaker_cooldown_ms} ms",
            flush=True,
        )
        for _ in range(kills):
            asyncio.run(_kill_once(cfg, row))
        for _ in range(pauses):
            row.failovers_1s.append(_paused_fails_over(cfg, 1.0))
            row.failovers_2s.append(_paused_fails_over(cfg, 2.0))
    return row


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def render(data: store.Section) -> list[str]:
    out = ["## Redis Cluster failover against its settings", "", *fmt.provenance(data)]
    out += [
        "| cluster-node-timeout | replica-validity-factor | replica writable after SIGKILL, s"
        " (min / median / max) | shard sells again via the router, s | other shards' failures"
        " | 1 s pause failed over | 2 s pause failed over |",
        "| ---: | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for run in data["runs"]:
        r = run["metrics"]
        if not r:
            out.append(f"| {run['subject']} | | run failed: {'; '.join(run['problems'])} | | | | |")
            continue
        out.append(
            f"| {r['node_timeout_ms']} ms{' + watch' if r['watched'] else ''}"
            f" | {r['validity_factor']}"
            f" | {_spread(r['promoted_s'])} | {_spread(r['router_s'])} | {r['other_failures']}"
            f" | {sum(r['failovers_1s'])}/{len(r['failovers_1s'])}"
            f" | {sum(r['failovers_2s'])}/{len(r['failovers_2s'])} |"
        )
    return [*out, ""]


@dataclass(frozen=True)
class FailoverOptions:
    configs: str = option(
        "5000,3000,2000,1500,1000,1000/0,1000/1",
        "node-timeout-ms[/validity-factor][+watch], comma separated",
    )
    kills: int = option(3, "SIGKILLs per config")
    pauses: int = option(3, "SIGSTOP pauses (1 s and 2 s) per config")
    port: int = option(7401, "the first of six free ports")
    wait_replicas: int = option(
        0,
        "the router's WAIT (redis_wait_replicas); with 1, a promoted primary sells"
        " only once the killed node is back as its replica, so it is restarted at once",
    )
    breaker_cooldown_ms: int = option(0, "the router's breaker cooldown (0: the setting's)")


def run(ctx: Context, args: FailoverOptions, rec: store.Recorder) -> dict[str, Any]:
    cooldown = args.breaker_cooldown_ms or ctx.cfg.shard_breaker_cooldown_ms
    base = dataclasses.replace(
        ctx.cfg, redis_wait_replicas=args.wait_replicas, shard_breaker_cooldown_ms=cooldown
    )
    for i, text in enumerate(t for t in args.configs.split(",") if t):
        config = Config.parse(text)

        def one(c: Config = config) -> tuple[dict[str, Any], list[str]]:
            row = dataclasses.asdict(measure(base, c, args.kills, args.pauses, args.port))
            return {**row.pop("config"), **row}, []

        rec.step(f"config {text}", ("failover", text, i), one, _brief)
    return {**dataclasses.asdict(args), "breaker_cooldown_ms": cooldown, "repeats": 1}


def _brief(m: dict[str, Any]) -> str:
    return f"writable after {_spread(m['promoted_s'])} s, router {_spread(m['router_s'])} s"
