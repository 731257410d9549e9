"""Auto-pipelining: script calls that arrive in the same event-loop tick for the same cluster
node go out as one write, so a burst of buyers costs one round trip per node, not one each.

Each node has one ``NodeLink`` (a plain asyncio connection, hiredis packing and parsing); the
replies of a batch come back in order on it. The cluster client still owns the topology: the
slot → node map, refreshed when a batch's node failed or a call was answered MOVED.

A batch holding script calls (every script writes) ends with ``WAIT <replicas> <timeout>`` on
the same connection, so its writes are answered only once the shard's replica has them too: when
fewer replicas acknowledged within the timeout, each script call of the batch fails with
ShardUnavailable (the write did happen on the primary: a 503 that a retry resolves, as after a
missed deadline). One WAIT per batch, not per call; ``redis_wait_replicas = 0`` sends none.

Every batch has its own deadline, one timer for the whole batch: a hung node costs its callers
a fast ShardUnavailable and never blocks the other nodes' batches; its late replies are still
read (so the connection stays in step) but answer nobody. A call the node did not run (MOVED,
ASK, TRYAGAIN, NOSCRIPT) is sent again where Redis points, as EVAL, on that node's link (so it
gets its WAIT too), under the deadline its first batch had: a redirection never buys a call more
time. The breaker stops new sends to a node that keeps missing deadlines, or whose replica keeps
failing to confirm, until a probe succeeds. While a node's WAIT is in flight, the calls for it
wait in a group commit (group_commit.py) and then go out as one batch under one WAIT.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import defaultdict
from typing import Any

import hiredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, RedisError, TryAgainError

from kernel.errors import ShardUnavailable
from shard_router.breaker import Breaker
from shard_router.deadline import FAILURES
from shard_router.group_commit import GroupCommit
from shard_router.node_link import Batch, NodeLink
from shard_router.scripts import Script

# (script, keys, args, future); a plain command is queued with script None and its whole
# argument list (command name first) in ``args``.
_Call = tuple[Script | None, list[str], list[Any], "asyncio.Future[Any]"]
_NOT_RUN = (AskError, TryAgainError, NoScriptError)  # MovedError is an AskError
_MAX_HOPS = 3  # a MOVED then an ASK then a NOSCRIPT is the longest honest chain
_TRYAGAIN_DELAY_S = 0.05  # a slot mid-migration: give the migration a moment
_ASKING = hiredis.pack_command(("ASKING",))
# While a node fails, the slot map is re-read this often, so a promoted replica takes its
# shards' calls within ~0.1 s of its promotion (at 1 s the router added up to a second to every
# failover: the failover section of bench.md). One refresh in flight at a time.
# Only for the first seconds of a spell of failures (a failover by the watch or by the node
# timeout is over by then): past them, once a second, since each refresh makes redis-py
# reconnect every node's pooled connections.
_REFRESH_EVERY_S = 0.1
_EAGER_FOR_S = 5.0
_REFRESH_LATER_S = 1.0
_CALM_S = 2.0  # no refresh asked for this long: the next failure starts a new spell
_REFRESH_TIMEOUT_S = 1.0
_MAX_CACHED_SLOTS = 100_000


class AutoPipeline:
    def __init__(
        self,
        client: RedisCluster,
        breaker: Breaker,
        timeout_s: float,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
    ) -> None:
        if wait_replicas > 0 and wait_timeout_ms / 1000 >= timeout_s:
            raise ValueError("the WAIT timeout must be shorter than the Redis deadline")
        self._client = client
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._wait_replicas = wait_replicas
        self._wait_timeout_ms = wait_timeout_ms
        wait: tuple[Any, ...] = ("WAIT", wait_replicas, wait_timeout_ms)
        self._wait = hiredis.pack_command(wait) if wait_replicas > 0 else None
        self._queued: dict[str, list[_Call]] = defaultdict(list)
        self._group = GroupCommit()
        self._flush_scheduled = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._links: dict[str, NodeLink] = {}
        self._slots: dict[str, int] = {}  # key → hash slot (CRC16 in Python costs ~10 µs)
        self._last_refresh = 0.0
        self._refreshing = False
        self._last_asked = 0.0  # monotonic: when a refresh was last asked for
        self._failing_since = 0.0  # monotonic: when this spell of failures began

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
            self._refresh_topology()  # the open circuit may be a node that failed over
            future.set_exception(ShardUnavailable(node, "circuit open"))
            return future
        self._queued[node].append((script, keys, args, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    async def close(self) -> None:
        closing = ShardUnavailable("cluster", "closing")
        for *_, future in self._group.drain():
            if not future.done():
                future.set_exception(closing)
        for link in self._links.values():
            link.fail(closing)
        self._links.clear()
        # A topology refresh still running would open connections after the client closed.
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, defaultdict(list)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        for node, calls in queued.items():
            if self._group.busy(node):
                self._group.hold(node, calls, deadline)  # sent when its WAIT in flight settles
            else:
                self._send(node, calls, deadline)

    def _send(
        self,
        node: str,
        calls: list[_Call],
        deadline: float,
        hops: int = 0,
        asking: bool = False,
    ) -> None:
        """One write of ``calls`` to ``node``, answered by ``deadline`` (loop time). A resent
        call (``hops`` > 0) goes as EVAL: the node it lands on may not have the script."""
        parts = [_ASKING] if asking else []
        writes = False
        for script, keys, args, _ in calls:
            if script is None:
                parts.append(hiredis.pack_command(tuple(args)))
                continue
            writes = True
            head = ("EVAL", script.source) if hops else ("EVALSHA", script.sha)
            parts.append(hiredis.pack_command((*head, len(keys), *keys, *args)))
        wait = self._wait if writes else None
        if wait is not None:
            parts.append(wait)
            self._group.sent(node)
        batch = Batch(
            node, calls, b"".join(parts), deadline, waits=wait is not None, asking=asking, hops=hops
        )
        batch.timer = asyncio.get_running_loop().call_at(deadline, self._expire, batch)
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
        except FAILURES as exc:
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
        self._settled(batch)  # (after the link went: held calls go out on a fresh one)

    def _lost(self, batch: Batch, exc: BaseException) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
            self._failed(batch, exc)
            self._settled(batch)

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
        replies = batch.replies[1:] if batch.asking else batch.replies
        confirmed = not batch.waits or self._confirmed(replies[-1])
        if confirmed:
            self._breaker.success(node)
        else:
            self._breaker.failure(node)
        not_run: list[tuple[_Call, RedisError]] = []
        # A WAIT's reply comes last, after the calls' own: zip stops before it.
        for call, result in zip(batch.calls, replies, strict=False):
            future = call[3]
            if future.done():
                continue  # the caller went away
            if isinstance(result, Exception):
                if isinstance(result, _NOT_RUN):
                    not_run.append((call, result))
                else:
                    future.set_exception(ShardUnavailable(node, str(result)))
            elif confirmed or call[0] is None:
                future.set_result(result)
            else:
                future.set_exception(
                    ShardUnavailable(
                        node,
                        f"replica did not confirm the write within {self._wait_timeout_ms} ms"
                        f" (WAIT answered {replies[-1]!r})",
                    )
                )
        if not_run:
            self._send_again(batch, not_run)
        self._settled(batch)

    def _settled(self, batch: Batch) -> None:
        """Once per batch: when it carried a WAIT, send what its node held meanwhile."""
        if not batch.waits:
            return
        held = self._group.settled(batch.node)
        if held is None:
            return
        deadline, calls = held
        if deadline > asyncio.get_running_loop().time():
            self._send(batch.node, calls, deadline)
            return
        late = ShardUnavailable(batch.node, "deadline exceeded before the node was free")
        for *_, future in calls:
            if not future.done():
                future.set_exception(late)

    def _confirmed(self, acked: Any) -> bool:
        return isinstance(acked, int) and acked >= self._wait_replicas

    def _send_again(self, batch: Batch, not_run: list[tuple[_Call, RedisError]]) -> None:
        """Calls the node did not run: MOVED (the slot lives elsewhere now, e.g. after a
        failover), ASK (mid-migration: ASKING first, on the same connection), TRYAGAIN (retry
        shortly, same node), NOSCRIPT (a restarted node lost its script cache). Each goes again
        within the first batch's deadline, at most ``_MAX_HOPS`` times."""
        loop = asyncio.get_running_loop()
        hops = batch.hops + 1
        again: dict[tuple[str, bool], list[_Call]] = defaultdict(list)
        later: list[_Call] = []
        for call, error in not_run:
            if isinstance(error, TryAgainError):
                later.append(call)  # bounded by the deadline alone
            elif hops > _MAX_HOPS:
                call[3].set_exception(
                    ShardUnavailable(batch.node, f"{_MAX_HOPS} redirections, then: {error}")
                )
            elif isinstance(error, MovedError):
                self._spawn(self._move_slot(error))
                again[(f"{error.host}:{error.port}", False)].append(call)
            elif isinstance(error, AskError):
                again[(f"{error.host}:{error.port}", True)].append(call)
            else:
                again[(batch.node, False)].append(call)
        for (node, asking), calls in again.items():
            self._send(node, calls, batch.deadline, hops, asking)
        if later:
            if batch.deadline - loop.time() > _TRYAGAIN_DELAY_S:
                resend = functools.partial(
                    self._send, batch.node, later, batch.deadline, batch.hops
                )
                loop.call_later(_TRYAGAIN_DELAY_S, resend)
            else:
                late = ShardUnavailable(batch.node, "TRYAGAIN until the deadline")
                for *_, future in later:
                    future.set_exception(late)

    async def _move_slot(self, error: MovedError) -> None:
        """Point the slot at the node that answered for it, now, without waiting for the next
        topology refresh, so the calls that follow go there directly."""
        with contextlib.suppress(*FAILURES, KeyError):  # the periodic refresh puts it right
            await self._client.nodes_manager.move_slot(error)
        self._refresh_topology()

    def _refresh_topology(self) -> None:
        now = time.monotonic()
        if now - self._last_asked > _CALM_S:
            self._failing_since = now
        self._last_asked = now
        eager = now - self._failing_since < _EAGER_FOR_S
        every = _REFRESH_EVERY_S if eager else _REFRESH_LATER_S
        if self._refreshing or now - self._last_refresh < every:
            return
        self._last_refresh = now
        self._refreshing = True
        self._spawn(self._reinitialize())

    async def _reinitialize(self) -> None:
        try:
            # Bounded: a hung startup node must not hold the one refresh slot.
            await asyncio.wait_for(self._client.nodes_manager.initialize(), _REFRESH_TIMEOUT_S)
        except FAILURES:
            pass  # the next failure tries again
        finally:
            self._refreshing = False
