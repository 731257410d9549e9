"""The benchmark's own sale, made through the real gateway's admin API, and the Redis bookkeeping
around it: count what a run reserved, and delete the hold records a run left behind (the stack's
Redis has a 1 GB ``maxmemory`` and other people's tests use it too)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import httpx
from redis.cluster import ClusterNode, RedisCluster

from kernel.settings import Settings
from rig.admin import NewItem, new_sale
from shard_router import shard_keys

PURCHASE_PATH = "/api/flash-sales/items/{}/purchase"
RESERVE_STOCK = 10_000_000
RESERVE_SHARDS = 8


@dataclass(frozen=True, slots=True)
class Item:
    item_id: int
    shards: int

    @property
    def path(self) -> str:
        return PURCHASE_PATH.format(self.item_id)


@dataclass(frozen=True, slots=True)
class BenchSale:
    sale_id: int
    sold_out: Item  # quantity 1, bought once at set-up
    gateway: Item  # ample stock, bought from by the gateway
    naive: Item  # ample stock, bought from by the naive gateway

    @property
    def items(self) -> tuple[Item, ...]:
        return (self.sold_out, self.gateway, self.naive)


def create(base_url: str, cfg: Settings, hours: float) -> BenchSale:
    """Create and arm one sale, open now, with the three items the scenarios need."""
    shapes = [(1, 1), (RESERVE_STOCK, RESERVE_SHARDS), (RESERVE_STOCK, RESERVE_SHARDS)]
    items = [NewItem(f"loadtest-{n}", q, s, price=990) for n, (q, s) in enumerate(shapes)]
    made = new_sale(
        base_url, cfg, items, opens_at=time.time() - 5, hours=hours, payment_window_s=3600
    )
    first, gateway, naive = (Item(i["itemId"], i["shards"]) for i in made["items"])
    return BenchSale(made["saleId"], first, gateway, naive)


def purchase(base_url: str, item: Item, token: bytes | None) -> int:
    headers = {"Authorization": f"Bearer {token.decode()}"} if token else {}
    return httpx.post(base_url + item.path, headers=headers, timeout=10).status_code


def metric(base_url: str, outcome: str) -> float:
    """A purchase outcome counter of the gateway's ``/metrics`` (0 when absent)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    pattern = rf'^flashsale_purchase_requests_total\{{[^}}]*outcome="{outcome}"[^}}]*\}} (\S+)$'
    found = [float(m) for m in re.findall(pattern, text, flags=re.MULTILINE)]
    return sum(found)


class Shards:
    """Direct reads and deletes on the benchmark items' shard keys."""

    def __init__(self, cfg: Settings) -> None:
        pairs = (a.rsplit(":", 1) for a in cfg.redis_nodes)
        nodes = [ClusterNode(h, int(p)) for h, p in pairs]  # type: ignore[no-untyped-call]
        self.client = RedisCluster(startup_nodes=nodes, socket_timeout=10)

    def reserved(self, item: Item) -> int:
        """Buyers holding a unit of ``item`` (sum of the dedup hashes over its shards)."""
        return sum(
            int(self.client.hlen(shard_keys(item.item_id, k).buyers)) for k in range(item.shards)
        )

    def clear_holds(self, item: Item) -> None:
        """Drop the hold, dedup and outbox hashes a run filled (stock stays)."""
        for k in range(item.shards):
            keys = shard_keys(item.item_id, k)
            for key in (keys.buyers, keys.orders, keys.outbox):
                self.client.unlink(key)

    def drop(self, item: Item) -> None:
        """Delete every key of ``item``: the end of the benchmark."""
        for k in range(item.shards):
            for key in shard_keys(item.item_id, k):
                self.client.unlink(key)

    def close(self) -> None:
        self.client.close()
