"""Fail a Redis primary over as soon as it is proven dead, not after cluster-node-timeout.

Redis Cluster fails a primary over once it has been unreachable for cluster-node-timeout, and
its replica then waits 500 ms plus up to 500 ms more before asking for votes: 2.2-2.6 s of 503s
at 1000 ms (the failover section of bench.md). A timeout cannot tell a dead
process from a paused one (a GC, a noisy neighbour), so a lower timeout fails pauses over. A
refused connection can: the host answered, and nothing listens on the port any more.

So this watcher probes every primary's port each round; after ``redis_failover_refusals``
refusals in a row it sends ``CLUSTER FAILOVER FORCE`` to that primary's most up-to-date replica.
That is Redis's own election (the other primaries still vote), started early; a primary that
times out is left to the cluster's own detection. Safe to run twice: a replica already promoted
refuses a second FAILOVER.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from kernel.periodic import run_every, stopped_by_signals
from kernel.settings import Settings

log = logging.getLogger(__name__)

_PROBE_TIMEOUT_S = 0.2  # an answer slower than this is a timeout: not proof of death
_ELECTION_S = 2.0  # a forced election that has not happened by then is asked for again


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    address: str  # host:port
    primary_of: str | None  # a replica: its primary's id
    serves_slots: bool
    healthy: bool  # connected, not flagged failing

    @classmethod
    def parse(cls, address: str, entry: dict[str, Any]) -> Node:
        """One node of CLUSTER NODES as redis-py parses it."""
        flags = set(str(entry["flags"]).split(","))
        return cls(
            node_id=str(entry["node_id"]),
            address=address.split("@", 1)[0],
            primary_of=str(entry["master_id"]) if "slave" in flags else None,
            serves_slots="master" in flags and bool(entry.get("slots")),
            healthy=bool(entry.get("connected")) and not flags & {"fail", "fail?", "noaddr"},
        )


def parse_nodes(listed: dict[str, dict[str, Any]]) -> list[Node]:
    return [Node.parse(address, entry) for address, entry in listed.items()]


async def refused(address: str) -> bool:
    """Does ``address`` refuse a TCP connection (only a refusal counts, never a timeout)?"""
    host, port = address.rsplit(":", 1)
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port)), _PROBE_TIMEOUT_S
        )
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False


class FailoverWatch:
    def __init__(self, cfg: Settings) -> None:
        self._seeds = cfg.redis_nodes
        self._threshold = cfg.redis_failover_refusals
        self.interval_s = cfg.redis_failover_probe_ms / 1000
        self._refusals: dict[str, int] = {}  # primary id → refusals in a row
        self._retry_at: dict[str, float] = {}  # primary id → when to ask again (loop time)
        self.promoted: list[str] = []  # replicas this watcher promoted, in order
        # The seed that answered the last CLUSTER NODES and its connection, kept open: a new
        # connection and its handshake every round were two thirds of an idle watch's CPU.
        self._kept: tuple[str, Redis] | None = None

    async def _topology(self) -> list[Node]:
        failed = None
        if self._kept is not None:
            failed, client = self._kept
            try:
                return parse_nodes(await client.cluster("NODES"))
            except (RedisError, OSError):
                await self.close()
        for seed in self._seeds:
            if seed == failed:
                continue  # it just failed: a paused one would cost its timeout twice
            client = _client(seed, _PROBE_TIMEOUT_S * 2)
            try:
                listed = await client.cluster("NODES")
            except (RedisError, OSError):
                await client.aclose()
                continue
            self._kept = (seed, client)
            return parse_nodes(listed)
        return []

    async def close(self) -> None:
        if self._kept is not None:
            client, self._kept = self._kept[1], None
            await client.aclose()

    async def step(self) -> None:
        nodes = await self._topology()
        primaries = [n for n in nodes if n.serves_slots]
        verdicts = await asyncio.gather(*(refused(p.address) for p in primaries))
        for primary, dead in zip(primaries, verdicts, strict=True):
            count = self._refusals[primary.node_id] = (
                self._refusals.get(primary.node_id, 0) + 1 if dead else 0
            )
            now = asyncio.get_running_loop().time()
            if count >= self._threshold and now >= self._retry_at.get(primary.node_id, 0.0):
                # An election takes a moment: ask once, and again only if it did not happen.
                self._retry_at[primary.node_id] = now + _ELECTION_S
                await self._promote(primary, [n for n in nodes if n.primary_of == primary.node_id])

    async def _promote(self, primary: Node, replicas: list[Node]) -> None:
        best: tuple[int, Node] | None = None
        for replica in (r for r in replicas if r.healthy):
            offset = await _replicated_offset(replica.address)
            if offset is not None and (best is None or offset > best[0]):
                best = (offset, replica)
        if best is None:
            log.warning(
                "redis primary %s refuses connections; no replica to promote", primary.address
            )
            return
        replica = best[1]
        client = _client(replica.address, 1.0)
        try:
            await client.cluster("FAILOVER", "FORCE")
        except RedisError as exc:
            log.warning("CLUSTER FAILOVER FORCE on %s refused: %s", replica.address, exc)
            return
        finally:
            await client.aclose()
        self.promoted.append(replica.address)
        log.warning(
            "redis primary %s refused %d connections in a row: promoted %s (offset %d)",
            primary.address,
            self._threshold,
            replica.address,
            best[0],
        )

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await run_every(self.interval_s, self.step, stop, "redis failover watch")
        finally:
            await self.close()


def _client(address: str, timeout_s: float) -> Redis:
    """One node, no retries: a dead seed must cost one refused connect, not redis-py's backoff."""
    host, port = address.rsplit(":", 1)
    return Redis(
        host=host,
        port=int(port),
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


async def _replicated_offset(address: str) -> int | None:
    client = _client(address, _PROBE_TIMEOUT_S * 2)
    try:
        info = await client.info("replication")
    except (RedisError, OSError):
        return None
    finally:
        await client.aclose()
    offset = info.get("slave_repl_offset")
    return int(offset) if offset is not None else None


async def watch(cfg: Settings) -> None:
    """Run until SIGTERM or SIGINT (between rounds)."""
    stop = asyncio.Event()
    with stopped_by_signals(stop):
        await FailoverWatch(cfg).run(stop)
