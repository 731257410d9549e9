"""Stock events on Redis pub/sub: ``soldout:<item>`` and ``restock:<item>``. PUBLISH on a cluster
reaches every node, so every gateway instance hears them wherever it subscribed."""

from __future__ import annotations

import asyncio
import contextlib

from redis.asyncio.cluster import RedisCluster

CHANNEL = "flashsale:stock-events"


async def publish(client: RedisCluster, event: str, item_id: int) -> None:
    """Best effort: the flags' TTL bounds the cost of a lost message."""
    await publish_message(client, CHANNEL, f"{event}:{item_id}")


async def publish_message(client: RedisCluster, channel: str, message: str) -> None:
    """PUBLISH within 1 s, or not at all: every listener also catches up on its own."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.publish(channel, message), 1.0)
