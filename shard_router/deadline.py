"""The one place a failed cold-path Redis call becomes ShardUnavailable (a 503 with
Retry-After): a deadline for one redis-py command, which holds even if redis-py never returns,
and what redis-py lets out when a connection broke.

Besides its own errors (ConnectionError, TimeoutError, ClusterDownError, ...) and the OS's,
redis-py lets out uvloop's RuntimeError ("unable to perform operation on <TCPTransport
closed=True>; the handler is closed") when it writes on a pooled connection whose server went
away (a node killed and restarted), and an AttributeError when a reconnect races a disconnect
(its writer already None). It drops only the connection that failed: the node's other pooled
ones are just as dead, and each would fail one more call. So the node's pool is dropped here,
and the next call connects afresh.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError, ResponseError

from kernel.errors import ShardUnavailable

FAILURES: tuple[type[BaseException], ...] = (RedisError, OSError, RuntimeError, AttributeError)


async def with_deadline(
    call: Any, timeout: float | None = None, *, client: RedisCluster | None = None
) -> Any:
    """Await ``call`` for at most ``timeout`` seconds (2 s by default); ShardUnavailable when it
    takes longer or fails. ``client``: the cluster client ``call`` runs on, whose connections
    are dropped when the failing node is not known."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=timeout or 2.0)
    if not done:
        # Left running: retrieve its outcome when it comes, so asyncio logs no lost exception.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise ShardUnavailable("cluster", "deadline exceeded")
    try:
        return task.result()
    except FAILURES as exc:
        raise await unavailable(exc, client) from exc


async def unavailable(exc: BaseException, client: RedisCluster | None = None) -> ShardUnavailable:
    """``exc`` as a 503, once the connections it may have left dead are dropped."""
    node = getattr(exc, "connection", None)  # redis-py's cluster client names the node
    if not isinstance(node, ClusterNode):
        node = None
    await drop_connections(exc, node, client)
    where = node.name if node is not None else "cluster"
    return ShardUnavailable(where, f"{type(exc).__name__}: {exc}")


async def drop_connections(
    exc: BaseException, node: ClusterNode | None, client: RedisCluster | None
) -> None:
    """After a transport failure: the node's pooled connections go (every node's, when which
    one failed is unknown); those in use now are closed when they come back."""
    if isinstance(exc, ResponseError):
        return  # the node answered: its connection is fine (on CLUSTERDOWN redis-py resets)
    nodes = [node] if node is not None else client.get_nodes() if client is not None else []
    for each in nodes:
        each.update_active_connections_for_reconnect()
        await each.disconnect_free_connections()
