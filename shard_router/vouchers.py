"""Flash voucher uses on the Redis Cluster: every key of a voucher carries the hash tag
``{voucher:<code>}``, so one Lua call takes a use with its hold, customer count and outbox entry.

One code lives on one node: a voucher's uses are not sharded (1,000 uses at 50,000 requests/s is
well within one Redis core, pipelined), which keeps the per-customer count exact in one call.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any, NamedTuple

from domain.vouchers import Outcome
from shard_router import scripts
from shard_router.deadline import with_deadline
from shard_router.router import ShardRouter


class VoucherKeys(NamedTuple):
    remaining: str
    customers: str
    holds: str
    outbox: str
    ended: str


def voucher_keys(code: str) -> VoucherKeys:
    tag = f"{{voucher:{code}}}"
    return VoucherKeys(
        f"{tag}:remaining", f"{tag}:customers", f"{tag}:holds", f"{tag}:outbox", f"{tag}:ended"
    )


def order_key(order_id: str) -> str:
    """Who owns an orderId over every voucher: its own hash tag, as its uses may be on any node
    (lua/voucher_order_claim.lua)."""
    return f"{{voucher-order:{order_id}}}"


_OUTCOMES = {
    0: Outcome.RESERVED,
    1: Outcome.REPLAY,
    2: Outcome.ALREADY_USED,
    3: Outcome.OUT_OF_STOCK,
    4: Outcome.ORDER_ID_CONFLICT,
    5: Outcome.ENDED,
    6: Outcome.NOT_LOADED,
}


def _customer(value: bytes | str | None) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class VoucherReservation:
    outcome: Outcome
    remaining: int = -1  # uses left after a RESERVED


@dataclass(frozen=True, slots=True)
class VoucherState:
    code: str
    node: str
    remaining: int | None  # None: not loaded
    holds: int
    customers: int
    outbox: int
    ended: int


class VoucherStore:
    """The voucher scripts of lua/, run through the shard router's auto-pipeline."""

    def __init__(self, router: ShardRouter) -> None:
        self.router = router

    async def reserve(
        self, code: str, customer_id: int, order_id: str, per_customer_limit: int, payload: bytes
    ) -> VoucherReservation:
        result, value = await self.router.pipeline.call(
            scripts.VOUCHER_RESERVE,
            list(voucher_keys(code)),
            [customer_id, order_id, per_customer_limit, payload],
        )
        outcome = _OUTCOMES[int(result)]
        if outcome is Outcome.RESERVED:
            return VoucherReservation(outcome, int(value))
        return VoucherReservation(outcome)

    async def release(self, code: str, order_id: str, *, ended: bool = True) -> bool:
        """Give the use of ``order_id`` back (once). ``ended=False`` only when its event never
        left the gateway, so that the caller's retry with the same orderId may take a use."""
        released = await self.router.pipeline.call(
            scripts.VOUCHER_RELEASE, list(voucher_keys(code)), [order_id, "1" if ended else "0"]
        )
        return bool(released)

    def ack_outbox(self, code: str, order_ids: list[str]) -> asyncio.Future[Any]:
        """Kafka acknowledged (or the writer stored) these uses: drop their outbox entries
        (batched with this tick's calls)."""
        return self.router.places.ack_outbox(voucher_keys(code).outbox, order_ids)

    async def outboxes_in_use(self, codes: list[str]) -> list[str]:
        """The codes whose outbox is not empty."""
        return await self.router.places.outboxes_in_use(
            codes, lambda code: voucher_keys(code).outbox
        )

    async def outbox(self, code: str) -> dict[str, bytes]:
        return await self.router.places.outbox(voucher_keys(code).outbox)

    async def holds_order(self, code: str, order_id: str) -> bool:
        """Does Redis hold a use for this orderId (taken, maybe not stored by the writer yet)?"""
        client = self.router.client
        key = voucher_keys(code).holds
        held = await with_deadline(client.hexists(key, order_id), client=client)
        return bool(held)

    async def claim_order(self, order_id: str, customer_id: int, code: str, combine: bool) -> bool:
        """Claim ``order_id`` for this customer before a reserve of ``code``. False: it is
        another customer's, or (``combine`` off: one use per order) another voucher's. Every
        True must be followed by ``settle_order`` once the reserve is decided."""
        claimed = await self.router.pipeline.call(
            scripts.VOUCHER_ORDER_CLAIM,
            [order_key(order_id)],
            [customer_id, code, "1" if combine else "0"],
        )
        return int(claimed) == 0

    async def settle_order(self, order_id: str, held: bool) -> None:
        """The claim's reserve is decided: ``held`` keeps the orderId its customer's for good;
        otherwise the claim is dropped once no other is pending."""
        await self.router.pipeline.call(
            scripts.VOUCHER_ORDER_SETTLE, [order_key(order_id)], ["1" if held else "0"]
        )

    async def holder_and_owner(self, code: str, order_id: str) -> tuple[int | None, int | None]:
        """The customer whose use of ``code`` this orderId holds, and the orderId's owner (over
        every voucher), in one pipelined round trip: the answer of a reserve met by the
        out-of-stock flag, which takes no use."""
        holds, owner = voucher_keys(code).holds, order_key(order_id)
        held, owned = await asyncio.gather(
            *self.router.pipeline.commands(
                [(holds, ["HGET", holds, order_id]), (owner, ["HGET", owner, "customer"])]
            )
        )
        return _customer(held), _customer(owned)

    async def holds(self, code: str) -> dict[str, int]:
        return await self.router.places.holds(voucher_keys(code).holds)

    async def load(
        self,
        code: str,
        remaining: int,
        holds: list[tuple[str, int]],
        ended: list[tuple[str, int]],
    ) -> None:
        """Rebuild the voucher: its uses left, its hold records ``(orderId, customerId)`` and each
        customer's count of them; the ``ended`` reservations are added to those remembered."""
        keys = voucher_keys(code)
        per_customer = Counter(customer for _, customer in holds)
        await self.router.places.load(
            keys.remaining,
            remaining,
            [(keys.holds, holds), (keys.customers, list(per_customer.items()))],
            [(keys.ended, ended)],
        )

    async def state(self, code: str) -> VoucherState:
        keys = voucher_keys(code)
        counts = await self.router.places.counts(
            keys.remaining, [keys.holds, keys.customers, keys.outbox, keys.ended]
        )
        holds, customers, outbox, ended = counts.lengths
        return VoucherState(code, counts.node, counts.left, holds, customers, outbox, ended)
