"""What became of given orders once a row has drained: stored or not, with which status and
unit shard, and whether Redis holds their unit now."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import asyncpg

from kernel.settings import Settings
from shard_router import ShardRouter


@dataclass(frozen=True, slots=True)
class Fate:
    status: str  # the stored status, or "NOT STORED"
    shard: int | None  # the unit's shard as stored
    held: bool  # does a shard hold its unit now?


def fates(cfg: Settings, item_id: int, shards: int, order_ids: Collection[str]) -> dict[str, Fate]:
    return asyncio.run(_fates(cfg, item_id, shards, list(order_ids)))


async def _fates(cfg: Settings, item_id: int, shards: int, order_ids: list[str]) -> dict[str, Fate]:
    conn = await asyncpg.connect(cfg.pg_dsn)
    router = ShardRouter(cfg)
    try:
        await router.start()
        rows = await conn.fetch(
            "select id::text as id, status, shard from flash_sale_order where id = any($1::uuid[])",
            order_ids,
        )
        held: set[str] = set()
        for k in range(shards):
            held.update(await router.holds(item_id, k))
    finally:
        await router.close()
        await conn.close()
    stored = {r["id"]: (str(r["status"]), int(r["shard"])) for r in rows}
    found = {}
    for order_id in order_ids:
        status, shard = stored.get(order_id, ("NOT STORED", None))
        found[order_id] = Fate(status, shard, order_id in held)
    return found


def summary(found: dict[str, Fate]) -> str:
    """``"3: PENDING, hold re-asserted 2, hold missing 1"``-like counts."""
    counts = Counter(
        f"{f.status}, {'hold present' if f.held else 'hold missing'}" for f in found.values()
    )
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "none"
