"""A waiting-room sale's fairness (docs/waiting-room.md), from its queue in Redis and its orders in
PostgreSQL: the rank correlation between arrival order and admission order (about 0 among who
arrived before the start, about 1 after it), the win rate per home shard, the winners' share
among early and late arrivals, and tickets per client address. ``flashsale fairness`` prints
the lines and draws the PNG; ``flashsale demo --waiting-room`` ends with them."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.waiting_room.queue import Snapshot, snapshot
from kernel.settings import Settings

_WINNERS = """
select o.user_id, min(i.shards) as shards from flash_sale_order o
join flash_sale_item i on i.id = o.item_id
where i.sale_id = $1 and o.status in ('PENDING', 'PAID')
group by o.user_id
"""


def spearman(xs: list[int], ys: list[int]) -> float:
    """Spearman's rank correlation of two lists of distinct values (1: same order, 0: none)."""
    n = len(xs)
    if n < 2:
        return float("nan")

    def ranks(values: list[int]) -> list[int]:
        out = [0] * n
        for rank, i in enumerate(sorted(range(n), key=values.__getitem__)):
            out[i] = rank
        return out

    d2 = sum((a - b) ** 2 for a, b in zip(ranks(xs), ranks(ys), strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


@dataclass
class Fairness:
    sale_id: int
    early: list[tuple[int, int]]  # (arrival rank, place) of who joined before the start
    late: list[tuple[int, int]]  # (join time ms, place) of who joined after it
    frontier: int
    won_early: int
    won_late: int
    per_shard: dict[int, tuple[int, int]]  # home shard → (winners, joiners)
    per_address: dict[str, int] = field(default_factory=dict)

    @property
    def rho_early(self) -> float:
        return _rho(self.early)

    @property
    def rho_late(self) -> float:
        return _rho(self.late)

    def lines(self, png: str) -> list[str]:
        joined = len(self.early) + len(self.late)
        won = self.won_early + self.won_late
        top = Counter(self.per_address).most_common(3)
        rates = "  ".join(
            f"{k}: {w}/{n} ({w / n:.1%})" for k, (w, n) in sorted(self.per_shard.items()) if n
        )
        return [
            f"fairness of sale {self.sale_id}",
            f"  joined          {joined} ({len(self.early)} before the start, "
            f"{len(self.late)} after); admitted up to place {self.frontier}",
            f"  rank corr.      early {self.rho_early:+.3f} (0: a random order), "
            f"late {self.rho_late:+.3f} (1: first come, first served)",
            f"  winners         {won}: {self.won_early} early "
            f"({_share(self.won_early, len(self.early))} of them), {self.won_late} late "
            f"({_share(self.won_late, len(self.late))} of them)",
            f"  win rate/shard  {rates or '-'}",
            f"  tickets/address {len(self.per_address)} addresses, most "
            + ", ".join(f"{a} {n}" for a, n in top),
            f"  chart           {png}",
        ]


def _rho(pairs: list[tuple[int, int]]) -> float:
    """Spearman's rank correlation of the pairs' two sides (NaN for none)."""
    return spearman(*map(list, zip(*pairs, strict=True))) if pairs else float("nan")


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def measure(sale_id: int, queue: Snapshot, winners: dict[int, int]) -> Fairness:
    """``winners``: buyer → the shards of the item they bought (home shard = buyer % shards)."""
    early_set = set(queue.early)
    rank = {b: i for i, b in enumerate(queue.early)}
    early = [(rank[b], p) for b, (p, _) in queue.places.items() if b in early_set and p]
    late = [(ms, p) for b, (p, ms) in queue.places.items() if b not in early_set]
    shards = max(winners.values(), default=1)
    per_shard: dict[int, tuple[int, int]] = {k: (0, 0) for k in range(shards)}
    for buyer in queue.places:
        won, n = per_shard[buyer % shards]
        per_shard[buyer % shards] = (won + (buyer in winners), n + 1)
    won_early = sum(1 for b in winners if b in early_set)
    won_late = sum(1 for b in winners if b in queue.places and b not in early_set)
    return Fairness(
        sale_id, early, late, queue.frontier, won_early, won_late, per_shard, queue.addresses
    )


def draw(f: Fairness, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    import matplotlib.pyplot as plt

    fig, ((early, late), (shards, addresses)) = plt.subplots(2, 2, figsize=(12, 9))
    fig.suptitle(f"Waiting room of sale {f.sale_id}: fairness")
    if f.early:
        xs, ys = zip(*f.early, strict=True)
        early.scatter(xs, ys, s=2)
    early.set(
        title=f"joined before the start: rank corr. {f.rho_early:+.3f}",
        xlabel="arrival rank",
        ylabel="place (admission order)",
    )
    if f.late:
        t0 = min(ms for ms, _ in f.late)
        late.scatter([(ms - t0) / 1000 for ms, _ in f.late], [p for _, p in f.late], s=2)
    late.set(
        title=f"joined after the start: rank corr. {f.rho_late:+.3f}",
        xlabel="seconds after the first late join",
        ylabel="place (admission order)",
    )
    keys = sorted(f.per_shard)
    shards.bar(keys, [w / n if n else 0 for w, n in (f.per_shard[k] for k in keys)])
    shards.set(title="win rate per home shard", xlabel="home shard", ylabel="winners / joiners")
    counts = Counter(f.per_address.values())
    addresses.bar([str(k) for k in sorted(counts)], [counts[k] for k in sorted(counts)])
    addresses.set(title="tickets per client address", xlabel="tickets", ylabel="addresses")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def default_path(cfg: Settings, sale_id: int) -> Path:
    return cfg.state_dir / "reports" / f"sale-{sale_id}-fairness.png"


async def write_fairness(
    cfg: Settings, pool: Any, router: Any, sale_id: int, out: Path | None = None
) -> tuple[Fairness, Path, list[str]]:
    """LookupError when the sale has no waiting room queue. Needs matplotlib."""
    queue = await snapshot(router.client, sale_id)
    if not queue.places:
        raise LookupError(f"sale {sale_id} has no waiting-room queue")
    winners = {r["user_id"]: r["shards"] for r in await pool.fetch(_WINNERS, sale_id)}
    found = measure(sale_id, queue, winners)
    path = out or default_path(cfg, sale_id)
    await asyncio.to_thread(draw, found, path)
    return found, path, found.lines(str(path))
