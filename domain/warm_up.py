"""Warm-up, one mechanism for an item's stock shards and a flash voucher: load its places in Redis
from the database, merged with what Redis has.

The places share ``limit − taken − others``: taken is what the database counts as held (the
active orders, ``used_count``), others the holds Redis has that the database does not count
(accepted and not stored by the writer yet, or of an order that has ended: reconciliation
releases those). Loading from the limit alone would hand a unit out twice after a Redis
restart; this never does.

Loading never drops a hold (lua/load.lua): the active orders' holds are added where Redis lacks
them (a failover lost them), and each place's counter is set from the holds it has at that
moment, so reservations and releases racing the load are counted, not wiped. Each place's units
left and holds are read together, and units stay on the places they are on where they can
(``spread``): a place whose units are all there only ever gains, so a buyer taking one there
while it loads never leaves it short. Only drift (units Redis lost or invented) moves units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

P = TypeVar("P")  # a place: an item's shard number, or a voucher's code


@dataclass(frozen=True, slots=True)
class Hold(Generic[P]):
    order_id: str
    owner: int  # the buyer (customer) holding the unit (use)
    place: P  # where the unit is held


@dataclass(frozen=True, slots=True)
class Stored(Generic[P]):
    """What the database says about one item or voucher."""

    limit: int  # quantity, total_limit
    taken: int  # units (uses) the database counts as held
    active: list[Hold[P]]  # their hold records
    # Order ids refused for capacity: a hold of one in Redis holds no unit (Redis granted one
    # it did not have), and is forfeited, its unit never given back (jobs/reconcile.py).
    unbacked: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Count:
    """One place's counter and hold records, read together (one round trip)."""

    left: int  # units (uses) left; 0 when the place is not loaded
    holds: int


@dataclass(frozen=True, slots=True)
class WarmedUp:
    units: int  # units (uses) left, over all places
    active: int  # holds of active orders, added where Redis lacked them
    in_flight: int  # holds kept from Redis that the database does not count


class Stock(Protocol[P]):
    """One item's shards, or one flash voucher, as warm-up sees it."""

    @property
    def places(self) -> Sequence[P]: ...

    async def holds(self, place: P) -> Mapping[str, int]: ...

    async def counts(self) -> Mapping[P, Count]: ...

    async def stored(self) -> Stored[P]: ...

    async def load(self, place: P, units: int, holds: list[Hold[P]]) -> None:
        """Load ``place`` (lua/load.lua): its holds kept, those of ``holds`` that are its own
        added where missing, units left + holds = ``units`` + its own among ``holds``."""
        ...


def spread(units: int, now: Sequence[int]) -> list[int]:
    """``units`` shared over places that have ``now`` left each, as close to ``now`` as they
    can be: what is missing goes to the emptiest places first, what is too much comes off the
    fullest first."""
    shares = [max(0, n) for n in now]
    missing = units - sum(shares)
    if missing >= 0:
        return _raise(shares, missing)
    return [-n for n in _raise([-n for n in shares], -missing)]


def _raise(values: list[int], amount: int) -> list[int]:
    """``values`` with ``amount`` added, the lowest raised first, to one level."""
    order = sorted(range(len(values)), key=values.__getitem__)
    total = 0
    for count in range(1, len(order) + 1):
        total += values[order[count - 1]]
        if count < len(order) and count * values[order[count]] - total < amount:
            continue  # raising these to the next one's level is not enough: take it in too
        level, extra = divmod(total + amount, count)
        # What does not divide evenly goes to those that had most (then the first), so the
        # places keep their order.
        lifted = sorted(order[:count], key=lambda k: (-values[k], k))
        raised = list(values)
        for rank, k in enumerate(lifted):
            raised[k] = level + (1 if rank < extra else 0)
        return raised
    return list(values)  # no places


async def warm_up(stock: Stock[P]) -> WarmedUp:
    stored = await stock.stored()
    active = {hold.order_id for hold in stored.active}
    held_active: dict[P, int] = {}  # per place: its holds of active orders
    unbacked = 0
    for place in stock.places:
        present = (await stock.holds(place)).keys()
        held_active[place] = len(present & active)
        unbacked += len(present & stored.unbacked)
    # After the holds: a hold taken meanwhile is in these counts, its unit out of ``left``.
    counts = await stock.counts()
    count = [counts.get(place, Count(0, 0)) for place in stock.places]
    others = sum(c.holds for c in count) - sum(held_active.values())
    # An unbacked hold holds no unit: it is counted as a hold, and not out of the limit.
    units = max(0, stored.limit + unbacked - stored.taken - others)
    shares = spread(units, [c.left for c in count])
    for place, share, c in zip(stock.places, shares, count, strict=True):
        await stock.load(place, share + c.holds - held_active[place], stored.active)
    return WarmedUp(units, len(stored.active), others)
