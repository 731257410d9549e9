"""Per-process SOLD-OUT flags, shared across instances by Redis pub/sub.

A flag answers 410 with no I/O. It lives at most ``ttl`` seconds, so even a lost restock message
cannot keep an item falsely sold out for longer than that: the next request after expiry asks
Redis again. A release that returns stock publishes ``restock`` and every instance drops its flag.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from redis.asyncio import Redis

from gateway.items import Item, ItemCatalog
from gateway.paths import purchase_path
from shard_router import ShardRouter, ShardUnavailable
from shard_router.stock_events import CHANNEL, publish

log = logging.getLogger(__name__)


class SoldOutFlags:
    def __init__(self, ttl_s: float, item_of: Callable[[int], Item | None]) -> None:
        self.ttl_s = ttl_s
        self._item_of = item_of
        self._until: dict[int, float] = {}
        # purchase path → monotonic deadline of the flag's 410, for items that are open: the
        # front answers those with one lookup and one clock read (see gateway/front.py). The
        # deadline is the flag's, capped at the sale's end; revalidate() redoes it whenever
        # the catalog changes, so a paused or rescheduled item leaves the index then.
        self.by_path: dict[str, float] = {}

    def is_sold_out(self, item_id: int) -> bool:
        until = self._until.get(item_id)
        return until is not None and until > time.monotonic()

    def mark(self, item_id: int) -> None:
        self._until[item_id] = time.monotonic() + self.ttl_s
        self._index(item_id)

    def clear(self, item_id: int) -> None:
        self._until.pop(item_id, None)
        self.by_path.pop(purchase_path(item_id), None)

    def flagged(self) -> list[int]:
        return list(self._until)

    def revalidate(self) -> None:
        """The catalog changed: re-derive every indexed path from the item as it is now."""
        for item_id in list(self._until):
            self._index(item_id)

    def _index(self, item_id: int) -> None:
        path = purchase_path(item_id)
        until = self._until.get(item_id)
        item = self._item_of(item_id)
        now = time.time()
        if until is None or item is None or not item.is_open(now):
            self.by_path.pop(path, None)
            return
        self.by_path[path] = min(until, time.monotonic() + (item.ends_at - now))


async def announce_restock(flags: SoldOutFlags, router: ShardRouter, item_id: int) -> None:
    """Units of the item came back: this instance's flag goes now, every other's by broadcast."""
    flags.clear(item_id)
    await publish(router.client, "restock", item_id)


async def keep_fresh(
    flags: SoldOutFlags, router: ShardRouter, catalog: ItemCatalog, stop: asyncio.Event
) -> None:
    """Re-check flagged items twice per TTL: still empty everywhere → the flag is extended, so
    the 410s never fall through to token checks and Redis when a TTL ends; stock back (a
    release whose broadcast was lost) → the flag goes. One pipelined GET per shard per item.
    An item whose sale has ended loses its flag unasked: a purchase of it is refused before
    any flag is read, and the catalog keeps a day of sales, whose sold-out items an idle
    gateway re-checked twice a second each."""
    while not stop.is_set():
        now = time.time()
        for item_id in flags.flagged():
            item = catalog.cached(item_id)
            if item is not None and item.ends_at <= now:
                flags.clear(item_id)
                continue
            try:
                left = None if item is None else await router.units_left(item.id, item.shards)
            except ShardUnavailable:
                continue  # unknown: let the TTL decide
            if left == 0:
                flags.mark(item_id)
            else:
                flags.clear(item_id)
        try:
            await asyncio.wait_for(stop.wait(), flags.ttl_s / 2)
        except TimeoutError:
            pass


async def listen(flags: SoldOutFlags, nodes: tuple[str, ...], stop: asyncio.Event) -> None:
    """Apply stock broadcasts to the local flags (see ``follow``)."""

    def apply(data: bytes) -> None:
        event, _, item = data.decode().partition(":")
        if event == "soldout":
            flags.mark(int(item))
        elif event == "restock":
            flags.clear(int(item))

    await follow(CHANNEL, nodes, stop, apply, "stock-event")


async def follow(
    channel: str,
    nodes: tuple[str, ...],
    stop: asyncio.Event,
    apply: Callable[[bytes], None],
    what: str,
) -> None:
    """Hand every message on ``channel`` to ``apply``; reconnect to another node when one goes
    away. PUBLISH on a cluster reaches every node, so any one node is enough to subscribe to.
    (The sold-out flags' and the waiting rooms' frontier use it.)"""
    while not stop.is_set():
        host, port = random.choice(nodes).rsplit(":", 1)
        client = Redis(host=host, port=int(port), socket_connect_timeout=1)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                while not stop.is_set():
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        apply(message["data"])
        except Exception as exc:  # noqa: BLE001 - any failure: reconnect elsewhere
            log.warning("%s subscription lost (%s); reconnecting", what, exc)
            await asyncio.sleep(0.5)
        finally:
            await client.aclose()
