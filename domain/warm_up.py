"""Warm-up, one mechanism for an item's stock shards and a flash voucher: rebuild its places in
Redis from the database.

The places share ``limit − taken − in flight``: taken is what the database counts as held
(the active orders, ``used_count``), in flight the holds Redis has that the database does not
know yet (accepted, not yet stored by the writer). Loading from the limit alone would hand a unit
out twice after a Redis restart; this never does. The hold records are rebuilt with it. Refused
while an outbox is not empty: the reload would forget an event still on its way to Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from domain.errors import NotReady

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
    known: frozenset[str]  # order ids whose hold in Redis, if any, is not in flight


@dataclass(frozen=True, slots=True)
class WarmedUp:
    units: int  # units (uses) left, over all places
    active: int  # holds rebuilt from the database
    in_flight: int  # holds kept from Redis, not in the database yet


class Stock(Protocol[P]):
    """One item's shards, or one flash voucher, as warm-up sees it."""

    @property
    def places(self) -> Sequence[P]: ...

    def busy(self, place: P) -> str:
        """Why ``place`` cannot be loaded while its outbox is not empty."""
        ...

    async def outbox(self, place: P) -> Mapping[str, bytes]: ...

    async def holds(self, place: P) -> Mapping[str, int]: ...

    async def stored(self) -> Stored[P]: ...

    async def load(self, place: P, units: int, holds: list[Hold[P]]) -> None:
        """Rebuild ``place`` with ``units`` left; ``holds`` are all of them, every place's."""
        ...


async def warm_up(stock: Stock[P]) -> WarmedUp:
    for place in stock.places:
        if await stock.outbox(place):
            raise NotReady(stock.busy(place))
    stored = await stock.stored()
    in_flight: dict[str, Hold[P]] = {}
    for place in stock.places:
        for order_id, owner in (await stock.holds(place)).items():
            if order_id not in stored.known:
                in_flight.setdefault(order_id, Hold(order_id, owner, place))
    holds = [*stored.active, *in_flight.values()]
    units = max(0, stored.limit - stored.taken - len(in_flight))
    base, extra = divmod(units, len(stock.places))
    for k, place in enumerate(stock.places):
        await stock.load(place, base + (1 if k < extra else 0), holds)
    return WarmedUp(units, len(stored.active), len(in_flight))
