"""A cold-path write confirmed on the replica: the command, then ``WAIT``, on one connection.

WAIT counts the replicas that have every write the *same connection* made, so the pair needs a
connection of its own: redis-py's cluster client may send two commands on two of its pooled
connections. Loading a place (lua/load.lua) goes this way rather than on the hot path's node
link, so its longer WAIT never holds the buyers' batches queued behind it on that link.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import MovedError

from kernel.errors import ShardUnavailable


async def run_confirmed(
    client: RedisCluster, key: str, command: Sequence[Any], replicas: int, wait_ms: int
) -> Any:
    """Run ``command`` on the primary owning ``key`` and, when ``replicas`` > 0, wait up to
    ``wait_ms`` for that many replicas to have it: ShardUnavailable if fewer did (the write is
    on the primary; the caller's retry repeats it, which a load may). The caller bounds the
    whole with its deadline."""
    for _ in range(2):  # once more after a MOVED: the slot's primary changed (a failover)
        node = client.get_node_from_key(key)
        if node is None:
            raise ShardUnavailable(key, "no node owns its slot")
        connection = Redis(host=node.host, port=int(node.port), socket_connect_timeout=1.0)
        try:
            pipe = connection.pipeline(transaction=False)
            pipe.execute_command(*command)
            if replicas > 0:
                pipe.execute_command("WAIT", replicas, wait_ms)
            replies = await pipe.execute()
        except MovedError as moved:
            await client.nodes_manager.move_slot(moved)
            continue
        finally:
            await connection.aclose()
        if replicas > 0 and int(replies[-1]) < replicas:
            raise ShardUnavailable(
                node.name, f"{replies[-1]} of {replicas} replicas confirmed within {wait_ms} ms"
            )
        return replies[0]
    raise ShardUnavailable(key, "moved twice")
