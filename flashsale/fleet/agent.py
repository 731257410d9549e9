"""The sold-out agent: keeps the balancer's sold-out entries as the gateways keep their flags.

``soldout:<item>`` on the stock-event channel sets the item's purchase path in haproxy's sold-out
table, and ``restock:<item>`` clears it, through haproxy's runtime API. Every ``fleet_resync_ms``
each entry is re-checked against the shards' stock: stock back, it goes; still empty, it is set
again. The table expires an entry a flag TTL (``sold_out_flag_ttl_ms``) after it was last set,
so an entry not confirmed for a TTL goes by itself, whatever the agent is doing: Redis
unreachable, the agent hung, killed or restarting, the same bound a gateway's own flag has. A
re-check only ever extends or removes an entry, never adds one: a restock that cleared it
meanwhile stays cleared.

haproxy unreachable is not fatal: commands are dropped (a restarted haproxy starts with an
empty table, which is "not sold out"), and the next re-check sets again what is still confirmed.
A restarted agent takes over the entries haproxy still holds, each with the time it has left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import time
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from flashsale.fleet.haproxy import SOLD_OUT_TABLE, clear_sold_out, set_sold_out, table_entries
from gateway.items import ItemCatalog
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX, purchase_path
from kernel.logs import setup
from kernel.settings import Settings, settings
from shard_router import ShardRouter
from shard_router.stock_events import CHANNEL

log = logging.getLogger(__name__)
COMMAND_TIMEOUT_S = 1.0


class BalancerTable:
    """The table as we set it: item → when its emptiness was last confirmed (monotonic)."""

    def __init__(self, socket_path: Path, ready_file: Path, ttl_s: float) -> None:
        self.socket_path = socket_path
        self.ready_file = ready_file
        self.ttl_s = ttl_s
        self.confirmed: dict[int, float] = {}
        # One command at a time, in the order decided: a set must never overtake the clear
        # of a restock that came after it.
        self._lock = asyncio.Lock()

    async def _command(self, line: str) -> str:
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
                try:
                    writer.write(line.encode() + b"\n")
                    await writer.drain()
                    return (await reader.read()).decode()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as exc:
            log.warning("balancer unreachable (%s): %r dropped", exc, line)
            return ""

    async def _set(self, item_id: int) -> None:
        await self._command(set_sold_out(purchase_path(item_id)))

    async def mark(self, item_id: int) -> None:
        async with self._lock:
            self.confirmed[item_id] = time.monotonic()
            await self._set(item_id)

    async def extend(self, item_id: int, checked_at: float) -> None:
        """Still empty as of ``checked_at``: an entry still set lives on (set again, which
        re-arms its expire). Never adds one: a restock may have cleared it while the check
        ran, and its stale reading must not bring the entry back."""
        async with self._lock:
            if item_id in self.confirmed:
                self.confirmed[item_id] = max(self.confirmed[item_id], checked_at)
                await self._set(item_id)

    def next_expiry(self) -> float | None:
        """When the oldest confirmation runs out (monotonic), if any entry is set."""
        return min(self.confirmed.values()) + self.ttl_s if self.confirmed else None

    async def clear(self, item_id: int) -> None:
        async with self._lock:
            if self.confirmed.pop(item_id, None) is not None:
                await self._command(clear_sold_out(purchase_path(item_id)))

    async def adopt(self) -> None:
        """Take over what haproxy holds (a restarted agent): each entry confirmed as long ago
        as its expire says, so it goes when haproxy would drop it, or is re-checked first."""
        now = time.monotonic()
        shown = await self._command(f"show table {SOLD_OUT_TABLE}")
        for path, left_ms in table_entries(shown).items():
            item = path.removeprefix(PURCHASE_PREFIX).removesuffix(PURCHASE_SUFFIX)
            if item.isdigit():
                self.confirmed[int(item)] = now - self.ttl_s + left_ms / 1000


async def listen(cfg: Settings, flags: BalancerTable, stop: asyncio.Event) -> None:
    """PUBLISH on a cluster reaches every node: any one node is enough to subscribe to."""
    while not stop.is_set():
        host, port = random.choice(cfg.redis_nodes).rsplit(":", 1)
        client = Redis(host=host, port=int(port), socket_connect_timeout=1)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(CHANNEL)
                # `fleet up` waits for this (our PID: a restarted agent's, not its forerunner's)
                flags.ready_file.write_text(str(os.getpid()))
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
    flags: BalancerTable,
    router: ShardRouter,
    catalog: ItemCatalog,
    stop: asyncio.Event,
) -> None:
    """Every ``fleet_resync_ms``, and also when a flag's confirmation is about to run out: a
    flag Redis cannot confirm goes exactly a TTL after its last confirmation, as a gateway's
    own flag expires, not up to a resync period later."""
    ttl_s = flags.ttl_s
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
                await flags.extend(item_id, checked_at)
            else:  # stock back, or no such item
                await flags.clear(item_id)
        wait_s = cfg.fleet_resync_ms / 1000
        expiry = flags.next_expiry()
        if expiry is not None:
            wait_s = min(wait_s, max(0.01, expiry - time.monotonic()))
        try:
            await asyncio.wait_for(stop.wait(), wait_s)
        except TimeoutError:
            pass


async def run(cfg: Settings, flags: BalancerTable) -> None:
    await flags.adopt()
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
    socket_path, ready_file = (Path(a) for a in sys.argv[1:3])
    ttl_s = cfg.sold_out_flag_ttl_ms / 1000
    asyncio.run(run(cfg, BalancerTable(socket_path, ready_file, ttl_s)))


if __name__ == "__main__":
    main()
