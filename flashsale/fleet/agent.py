"""The sold-out agent: keeps the balancer's sold-out map as the gateways keep their flags.

``soldout:<item>`` on the stock-event channel adds the item's purchase path to the map, and
``restock:<item>`` deletes it, through haproxy's runtime API. A lost message cannot leave a
stale entry: every ``fleet_resync_ms`` each entry is re-checked against the shards' stock (stock
back: it goes), and one not confirmed empty for a flag TTL (``sold_out_flag_ttl_ms``, Redis
unreachable) goes at that TTL, the bound a gateway's own flag has. A re-check only ever extends
or removes an entry, never adds one: a restock that cleared it meanwhile stays cleared.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from gateway.items import ItemCatalog
from gateway.paths import purchase_path
from kernel.logs import setup
from kernel.settings import Settings, settings
from shard_router import ShardRouter
from shard_router.stock_events import CHANNEL

log = logging.getLogger(__name__)


class BalancerMap:
    """The map as we set it: item → when its emptiness was last confirmed (monotonic)."""

    def __init__(self, socket_path: Path, map_path: Path, ready_file: Path) -> None:
        self.socket_path = socket_path
        self.map_path = map_path
        self.ready_file = ready_file
        self.confirmed: dict[int, float] = {}

    async def _command(self, line: str) -> str:
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            return (await reader.read()).decode()
        finally:
            writer.close()

    async def mark(self, item_id: int) -> None:
        known = item_id in self.confirmed
        self.confirmed[item_id] = time.monotonic()
        if not known:  # `add map` on a present key would add a duplicate entry
            await self._command(f"add map {self.map_path} {purchase_path(item_id)} 1")

    def extend(self, item_id: int, checked_at: float) -> None:
        """Still empty as of ``checked_at``: a flag still set lives on. Never adds one: a
        restock may have cleared it while the check ran, and its stale reading must not
        bring the flag back."""
        if item_id in self.confirmed:
            self.confirmed[item_id] = max(self.confirmed[item_id], checked_at)

    def next_expiry(self, ttl_s: float) -> float | None:
        """When the oldest confirmation runs out (monotonic), if any flag is set."""
        return min(self.confirmed.values()) + ttl_s if self.confirmed else None

    async def clear(self, item_id: int) -> None:
        if self.confirmed.pop(item_id, None) is not None:
            await self._command(f"del map {self.map_path} {purchase_path(item_id)}")

    async def reset(self) -> None:
        self.confirmed.clear()
        await self._command(f"clear map {self.map_path}")


async def listen(cfg: Settings, flags: BalancerMap, stop: asyncio.Event) -> None:
    """PUBLISH on a cluster reaches every node: any one node is enough to subscribe to."""
    while not stop.is_set():
        host, port = random.choice(cfg.redis_nodes).rsplit(":", 1)
        client = Redis(host=host, port=int(port), socket_connect_timeout=1)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(CHANNEL)
                flags.ready_file.touch()  # `fleet up` waits for this: no broadcast is missed
                while not stop.is_set():
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is None:
                        continue
                    event, _, item = message["data"].decode().partition(":")
                    if event == "soldout":
                        await flags.mark(int(item))
                    elif event == "restock":
                        await flags.clear(int(item))
        except Exception as exc:  # noqa: BLE001 - any failure: reconnect; resync covers the gap
            log.warning("stock-event subscription lost (%s); reconnecting", exc)
            await asyncio.sleep(0.5)
        finally:
            await client.aclose()


async def resync(
    cfg: Settings,
    flags: BalancerMap,
    router: ShardRouter,
    catalog: ItemCatalog,
    stop: asyncio.Event,
) -> None:
    """Every ``fleet_resync_ms``, and also when a flag's confirmation is about to run out: a
    flag Redis cannot confirm goes exactly a TTL after its last confirmation, as a gateway's
    own flag expires, not up to a resync period later."""
    ttl_s = cfg.sold_out_flag_ttl_ms / 1000
    while not stop.is_set():
        for item_id in list(flags.confirmed):
            confirmed, checked_at = flags.confirmed.get(item_id), time.monotonic()
            if confirmed is None:  # a restock cleared it meanwhile
                continue
            if checked_at - confirmed >= ttl_s:  # unconfirmed for a TTL (Redis unreachable)
                await flags.clear(item_id)
                continue
            try:
                item = await catalog.get(item_id)
                left = None if item is None else await router.units_left(item.id, item.shards)
            except Exception as exc:  # noqa: BLE001 - unknown: the TTL decides, next round
                log.debug("re-check of item %s failed (%s)", item_id, exc)
                continue
            if left == 0:
                flags.extend(item_id, checked_at)
            else:  # stock back, or no such item
                await flags.clear(item_id)
        wait_s = cfg.fleet_resync_ms / 1000
        expiry = flags.next_expiry(ttl_s)
        if expiry is not None:
            wait_s = min(wait_s, max(0.01, expiry - time.monotonic()))
        try:
            await asyncio.wait_for(stop.wait(), wait_s)
        except TimeoutError:
            pass


async def run(cfg: Settings, flags: BalancerMap) -> None:
    await flags.reset()
    router = ShardRouter(cfg)
    await router.start()
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=2)
    catalog = ItemCatalog(pool, cfg.item_cache_seconds)
    stop = asyncio.Event()
    try:
        await asyncio.gather(listen(cfg, flags, stop), resync(cfg, flags, router, catalog, stop))
    finally:
        await router.close()
        await pool.close()


def main() -> None:
    cfg = settings()
    setup(cfg)
    socket_path, map_path, ready_file = (Path(a) for a in sys.argv[1:4])
    asyncio.run(run(cfg, BalancerMap(socket_path, map_path, ready_file)))


if __name__ == "__main__":
    main()
