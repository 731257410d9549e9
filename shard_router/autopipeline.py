"""Auto-pipelining: script calls that arrive in the same event-loop tick for the same cluster
node go out as one write, so a burst of buyers costs one round trip per node, not one each.

Each node has one ``NodeLink`` (a plain asyncio connection, hiredis packing and parsing); the
replies of a batch come back in order on it. The cluster client still owns the topology: the
slot → node map, and a call answered MOVED/ASK (or a batch whose node failed) triggers a
topology refresh, and a redirected call is retried once through the cluster client, which
follows redirections itself.

Every batch has its own deadline, one timer for the whole batch: a hung node costs its callers
a fast ShardUnavailable and never blocks the other nodes' batches; its late replies are still
read (so the connection stays in step) but answer nobody. The breaker stops new sends to a node
that keeps missing deadlines until a probe succeeds.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import hiredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, RedisError, TryAgainError

from kernel.errors import ShardUnavailable
from shard_router.breaker import Breaker
from shard_router.node_link import Batch, NodeLink
from shard_router.scripts import ALL, Script

# (script, keys, args, future); a plain command is queued with script None and its whole
# argument list (command name first) in ``args``.
_Call = tuple[Script | None, list[str], list[Any], "asyncio.Future[Any]"]
_REDIRECTED = (MovedError, AskError, TryAgainError)
_REFRESH_EVERY_S = 1.0
_MAX_CACHED_SLOTS = 100_000


class AutoPipeline:
    def __init__(self, client: RedisCluster, breaker: Breaker, timeout_s: float) -> None:
        self._client = client
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._queued: dict[str, list[_Call]] = defaultdict(list)
        self._flush_scheduled = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._links: dict[str, NodeLink] = {}
        self._slots: dict[str, int] = {}  # key → hash slot (CRC16 in Python costs ~10 µs)
        self._last_refresh = 0.0

    def node_of(self, key: str) -> str:
        slot = self._slots.get(key)
        if slot is None:
            if len(self._slots) > _MAX_CACHED_SLOTS:
                self._slots.clear()
            slot = self._slots[key] = self._client.keyslot(key)
        try:
            node = self._client.nodes_manager.get_node_from_slot(slot)
        except Exception as exc:  # noqa: BLE001 - redis-py raises SlotNotCoveredError and kin
            raise ShardUnavailable(key, f"no node owns slot {slot}: {exc}") from None
        return str(node.name)

    # call and command hand back the future itself: no coroutine frame per call. No timer per
    # call either: the batch deadline settles every future of the batch.

    def call(self, script: Script, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """EVALSHA ``script`` on the node owning ``keys``, batched with this tick's calls."""
        return self._queue(script, keys, args)

    def command(self, key: str, *command: Any) -> asyncio.Future[Any]:
        """A plain command on ``key``'s node (e.g. an outbox HDEL), batched the same way."""
        return self._queue(None, [key], list(command))

    def commands(self, commands: list[tuple[str, list[Any]]]) -> list[asyncio.Future[Any]]:
        """Many plain commands at once, ``(key, [name, *args])`` each, for a scan: futures, no
        task per command (await them with ``asyncio.gather``)."""
        return [self._queue(None, [key], args) for key, args in commands]

    def _queue(
        self, script: Script | None, keys: list[str], args: list[Any]
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        try:
            node = self.node_of(keys[0])
        except ShardUnavailable as exc:
            future.set_exception(exc)
            return future
        if not self._breaker.allow(node):
            future.set_exception(ShardUnavailable(node, "circuit open"))
            return future
        self._queued[node].append((script, keys, args, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    async def close(self) -> None:
        for link in self._links.values():
            link.fail(ShardUnavailable("cluster", "closing"))
        self._links.clear()

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, defaultdict(list)
        loop = asyncio.get_running_loop()
        for node, calls in queued.items():
            payload = b"".join(
                hiredis.pack_command(
                    tuple(args)
                    if script is None
                    else ("EVALSHA", script.sha, len(keys), *keys, *args)
                )
                for script, keys, args, _ in calls
            )
            batch = Batch(node, calls, payload)
            batch.timer = loop.call_later(self._timeout_s, self._expire, batch)
            self._link(node).send(batch)

    def _link(self, node: str) -> NodeLink:
        link = self._links.get(node)
        if link is None or link.closed:
            link = self._links[node] = NodeLink(self._answered, self._lost)
            self._spawn(self._connect(node, link))
        return link

    async def _connect(self, node: str, link: NodeLink) -> None:
        host, port = node.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: link, host, int(port)), self._timeout_s * 4
            )
        except (OSError, TimeoutError) as exc:
            link.fail(exc)

    def _expire(self, batch: Batch) -> None:
        """The deadline passed with replies missing: the node may be hung or gone. The link is
        dropped too (its other batches fail now, not one deadline each), so a connection that
        went silent is replaced by a fresh one on the next send."""
        batch.timer = None
        failure = TimeoutError("deadline exceeded")
        self._failed(batch, failure)
        link = self._links.pop(batch.node, None)
        if link is not None:
            link.fail(failure)

    def _lost(self, batch: Batch, exc: BaseException) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
            self._failed(batch, exc)

    def _failed(self, batch: Batch, failure: BaseException) -> None:
        self._breaker.failure(batch.node)
        self._refresh_topology()  # the node may have failed over
        error = ShardUnavailable(batch.node, f"{type(failure).__name__}: {failure}")
        for *_, future in batch.calls:
            if not future.done():
                future.set_exception(error)

    def _answered(self, batch: Batch) -> None:
        if batch.timer is None:
            return  # past its deadline: every caller has been answered already
        batch.timer.cancel()
        batch.timer = None
        node = batch.node
        self._breaker.success(node)
        for (script, keys, args, future), result in zip(batch.calls, batch.replies, strict=True):
            if future.done():
                continue  # the caller went away
            if script is None:
                if isinstance(result, Exception):
                    future.set_exception(ShardUnavailable(node, str(result)))
                else:
                    future.set_result(result)
            elif isinstance(result, NoScriptError):
                # A restarted or failed-over node lost its script cache: EVAL loads it again.
                self._spawn(self._via_cluster("EVAL", script.source, keys, args, future))
            elif isinstance(result, _REDIRECTED):
                self._refresh_topology()
                self._spawn(self._via_cluster("EVALSHA", script.sha, keys, args, future))
            elif isinstance(result, Exception):
                future.set_exception(ShardUnavailable(node, str(result)))
            else:
                future.set_result(result)

    async def _via_cluster(
        self,
        command: str,
        script: str | bytes,
        keys: list[str],
        args: list[Any],
        future: asyncio.Future[Any],
    ) -> None:
        """One call through the cluster client, which follows MOVED/ASK and reloads scripts."""
        try:
            result = await self._client.execute_command(command, script, len(keys), *keys, *args)
        except NoScriptError:
            self._spawn(self._via_cluster("EVAL", _source_of(script), keys, args, future))
            return
        except (RedisError, OSError) as exc:
            if not future.done():
                future.set_exception(ShardUnavailable("cluster", str(exc)))
            return
        if not future.done():
            future.set_result(result)

    def _refresh_topology(self) -> None:
        now = time.monotonic()
        if now - self._last_refresh < _REFRESH_EVERY_S:
            return
        self._last_refresh = now
        self._spawn(self._reinitialize())

    async def _reinitialize(self) -> None:
        try:
            await self._client.nodes_manager.initialize()
        except (RedisError, OSError):
            pass  # the next failure tries again


def _source_of(sha: str | bytes) -> bytes:
    for script in ALL:
        if script.sha == sha:
            return script.source
    raise ShardUnavailable("cluster", f"unknown script {sha!r}")
