"""Flash voucher uses on the Redis Cluster: every key of a voucher carries the hash tag
``{voucher:<code>}``, so one Lua call takes a use with its hold, customer count and outbox entry.

One code lives on one node: a voucher's uses are not sharded (1,000 uses at 50,000 requests/s is
well within one Redis core, pipelined), which keeps the per-customer count exact in one call.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, NamedTuple

from domain.vouchers import Outcome
from shard_router import scripts
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


_OUTCOMES = {
    0: Outcome.RESERVED,
    1: Outcome.REPLAY,
    2: Outcome.ALREADY_USED,
    3: Outcome.OUT_OF_STOCK,
    4: Outcome.ORDER_ID_CONFLICT,
    5: Outcome.ENDED,
    6: Outcome.NOT_LOADED,
}


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
        key = voucher_keys(code).outbox
        return self.router.pipeline.command(key, "HDEL", key, *order_ids)

    async def outboxes_in_use(self, codes: list[str]) -> list[str]:
        """The codes whose outbox is not empty: one HLEN each, all sent in the same tick."""
        keys = [voucher_keys(code).outbox for code in codes]
        pipeline = self.router.pipeline
        lengths = await asyncio.gather(*pipeline.commands([(k, ["HLEN", k]) for k in keys]))
        return [code for code, length in zip(codes, lengths, strict=True) if length]

    async def outbox(self, code: str) -> dict[str, bytes]:
        raw = await self.router._with_deadline(
            self.router.client.hgetall(voucher_keys(code).outbox)
        )
        return {k.decode(): v for k, v in raw.items()}

    async def holds_order(self, code: str, order_id: str) -> bool:
        """Does Redis hold a use for this orderId (taken, maybe not stored by the writer yet)?"""
        held = await self.router._with_deadline(
            self.router.client.hexists(voucher_keys(code).holds, order_id)
        )
        return bool(held)

    async def holds(self, code: str) -> dict[str, int]:
        raw = await self.router._with_deadline(self.router.client.hgetall(voucher_keys(code).holds))
        return {k.decode(): int(v) for k, v in raw.items()}

    async def load(
        self,
        code: str,
        remaining: int,
        holds: list[tuple[str, int]],
        ended: list[tuple[str, int]],
    ) -> None:
        args: list[Any] = [remaining, len(holds)]
        for order_id, customer_id in holds:
            args += [order_id, customer_id]
        args.append(len(ended))
        for order_id, customer_id in ended:
            args += [order_id, customer_id]
        await self.router._with_deadline(
            self.router.client.evalsha(scripts.VOUCHER_LOAD.sha, 5, *voucher_keys(code), *args),
            timeout=10,
        )

    async def state(self, code: str) -> VoucherState:
        keys = voucher_keys(code)
        pipe = self.router.client.pipeline()
        pipe.execute_command("GET", keys.remaining)
        for key in (keys.holds, keys.customers, keys.outbox, keys.ended):
            pipe.execute_command("HLEN", key)
        remaining, holds, customers, outbox, ended = await self.router._with_deadline(
            pipe.execute()
        )
        return VoucherState(
            code,
            self.router.pipeline.node_of(keys.remaining),
            None if remaining is None else int(remaining),
            holds,
            customers,
            outbox,
            ended,
        )
