"""Auto-pipelining: script calls that arrive in the same event-loop tick for the same cluster
node go out as one pipeline, so a burst of buyers costs one round trip per node, not one each.

The batches go through a plain (non-cluster) redis-py client per node: redis-py's
ClusterPipeline resolves a command policy per command and measured 1.7x slower here at 256
concurrent buyers (bench.md). The cluster client still owns the topology: the slot → node map,
and a call answered MOVED/ASK (or a batch whose node failed) triggers a topology refresh and is
retried once through the cluster client, which follows redirections itself.

Each node's pipeline runs as its own task with its own deadline: a hung node costs its callers
a fast ShardUnavailable and never blocks the other nodes' batches. A pipeline that outlives its
deadline is abandoned, not awaited (redis-py may leave it pending past cancellation); the breaker
then stops new sends to that node until a probe succeeds.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import hiredis
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import AskError, MovedError, NoScriptError, RedisError, TryAgainError

from .breaker import Breaker
from .errors import ShardUnavailable
from .scripts import ALL, Script

# (script, keys, args, future); a plain command is queued with script None and its whole
# argument list (command name first) in ``args``.
_Call = tuple[Script | None, list[str], list[Any], "asyncio.Future[Any]"]
_REDIRECTED = (MovedError, AskError, TryAgainError)
_REFRESH_EVERY_S = 1.0


class HiredisPackedConnection(Connection):
    """redis-py's asyncio connection packs commands in Python (~15 µs for a reserve call
    here); its sync client already uses hiredis' C packer, and so do we."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return [_pack(args)]

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(_pack(tuple(cmd)) for cmd in commands)]


def _pack(args: tuple[Any, ...]) -> bytes:
    # Like redis-py: a command name given as "CONFIG GET" goes out as two arguments.
    if isinstance(args[0], str) and " " in args[0]:
        args = (*args[0].split(), *args[1:])
    return bytes(hiredis.pack_command(args))


class AutoPipeline:
    def __init__(self, client: RedisCluster, breaker: Breaker, timeout_s: float) -> None:
        self._client = client
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._queued: dict[str, list[_Call]] = defaultdict(list)
        self._flush_scheduled = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._node_clients: dict[str, Redis] = {}
        self._last_refresh = 0.0

    def node_of(self, key: str) -> str:
        node = self._client.get_node_from_key(key)
        if node is None:
            raise ShardUnavailable(key, "no node owns this slot")
        return str(node.name)

    async def call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """EVALSHA ``script`` on the node owning ``keys``, batched with this tick's calls."""
        return await self._enqueue(script, keys, args)

    async def command(self, key: str, *command: Any) -> Any:
        """A plain command on ``key``'s node (e.g. an outbox HDEL), batched the same way."""
        return await self._enqueue(None, [key], list(command))

    async def _enqueue(self, script: Script | None, keys: list[str], args: list[Any]) -> Any:
        node = self.node_of(keys[0])
        if not self._breaker.allow(node):
            raise ShardUnavailable(node, "circuit open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued[node].append((script, keys, args, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        # No timer per call: _send settles every future of its batch by the batch deadline.
        return await future

    async def close(self) -> None:
        for client in self._node_clients.values():
            await client.aclose()
        self._node_clients.clear()

    def _node_client(self, node: str) -> Redis:
        client = self._node_clients.get(node)
        if client is None:
            host, port = node.rsplit(":", 1)
            timeout = max(self._timeout_s * 4, 1)
            pool = ConnectionPool(
                connection_class=HiredisPackedConnection,
                host=host,
                port=int(port),
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
            )
            client = Redis.from_pool(pool)  # the client owns (and closes) its pool
            self._node_clients[node] = client
        return client

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, defaultdict(list)
        for node, calls in queued.items():
            self._spawn(self._send(node, calls))

    async def _send(self, node: str, calls: list[_Call]) -> None:
        pipe = self._node_client(node).pipeline(transaction=False)
        for script, keys, args, _ in calls:
            if script is None:
                pipe.execute_command(*args)
            else:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        execution = asyncio.ensure_future(pipe.execute(raise_on_error=False))
        # asyncio.wait, not wait_for: past the deadline the call is abandoned, never awaited.
        done, _ = await asyncio.wait({execution}, timeout=self._timeout_s)
        failure: BaseException | None = None
        if not done:
            execution.add_done_callback(_consume_outcome)
            failure = TimeoutError("deadline exceeded")
        elif (exc := execution.exception()) is not None:
            failure = exc
        if failure is not None:
            self._breaker.failure(node)
            self._refresh_topology()  # the node may have failed over
            error = ShardUnavailable(node, f"{type(failure).__name__}: {failure}")
            for *_, future in calls:
                if not future.done():
                    future.set_exception(error)
            return
        self._breaker.success(node)
        for (script, keys, args, future), result in zip(calls, execution.result(), strict=True):
            if future.done():
                continue  # the caller gave up at its deadline
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


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(ShardUnavailable("cluster", "deadline exceeded"))


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
