"""Auto-pipelining: script calls that arrive in the same event-loop tick for the same cluster
node go out as one pipeline, so a burst of buyers costs one round trip per node, not one each.

Each node's pipeline runs as its own task with its own deadline: a hung node costs its callers
a fast ShardUnavailable and never blocks the other nodes' batches. A pipeline that outlives its
deadline is abandoned, not awaited (redis-py may leave it pending past cancellation); the breaker
then stops new sends to that node until a probe succeeds.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, RedisError

from .breaker import Breaker
from .errors import ShardUnavailable
from .scripts import Script

_Call = tuple[Script, list[str], list[Any], "asyncio.Future[Any]"]


class AutoPipeline:
    def __init__(self, client: RedisCluster, breaker: Breaker, timeout_s: float) -> None:
        self._client = client
        self._breaker = breaker
        self._timeout_s = timeout_s
        self._queued: dict[str, list[_Call]] = defaultdict(list)
        self._flush_scheduled = False
        self._abandoned: set[asyncio.Task[None]] = set()

    def node_of(self, key: str) -> str:
        node = self._client.get_node_from_key(key)
        if node is None:
            raise ShardUnavailable(key, "no node owns this slot")
        return str(node.name)

    async def call(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        node = self.node_of(keys[0])
        if not self._breaker.allow(node):
            raise ShardUnavailable(node, "circuit open")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued[node].append((script, keys, args, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        try:
            return await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            raise ShardUnavailable(node, "deadline exceeded") from None

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, defaultdict(list)
        for node, calls in queued.items():
            task = asyncio.ensure_future(self._send(node, calls))
            self._abandoned.add(task)
            task.add_done_callback(self._abandoned.discard)

    async def _send(self, node: str, calls: list[_Call]) -> None:
        pipe = self._client.pipeline()
        for script, keys, args, _ in calls:
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
            error = ShardUnavailable(node, f"{type(failure).__name__}: {failure}")
            for *_, future in calls:
                if not future.done():
                    future.set_exception(error)
            return
        results = execution.result()
        self._breaker.success(node)
        for (script, keys, args, future), result in zip(calls, results, strict=True):
            if future.done():
                continue  # the caller gave up at its deadline
            if isinstance(result, NoScriptError):
                # A restarted or failed-over node lost its script cache: EVAL loads it again.
                self._retry_with_source(script, keys, args, future)
            elif isinstance(result, Exception):
                future.set_exception(ShardUnavailable(node, str(result)))
            else:
                future.set_result(result)

    def _retry_with_source(
        self, script: Script, keys: list[str], args: list[Any], future: asyncio.Future[Any]
    ) -> None:
        async def run() -> None:
            try:
                result = await self._client.execute_command(
                    "EVAL", script.source, len(keys), *keys, *args
                )
            except (RedisError, OSError) as exc:
                if not future.done():
                    future.set_exception(ShardUnavailable(self.node_of(keys[0]), str(exc)))
                return
            if not future.done():
                future.set_result(result)

        task = asyncio.ensure_future(run())
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
