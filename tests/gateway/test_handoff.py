"""The hand-off rules every outbox shares: delivered → the entry is acked; never sent → the unit
goes back (even when Redis cannot take it, the answer is a 503); outcome unknown → the hold
stays and the 503 names the orderId."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gateway.errors import Unavailable
from gateway.handoff import HandOff
from gateway.outbox import Outbox
from gateway.producer import NeverSent, OrderProducer, OutcomeUnknown
from kernel.events import VoucherReserved
from kernel.request_context import Headers, kafka_headers
from shard_router import ShardUnavailable


class FakeProducer:
    def __init__(self, fails_with: Exception | None = None) -> None:
        self.fails_with = fails_with
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.headers: list[Headers | None] = []

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Headers | None = None
    ) -> None:
        if self.fails_with is not None:
            raise self.fails_with
        self.sent.append((topic, key, value))
        self.headers.append(headers)


class FakeStore:
    def __init__(self) -> None:
        self.acked: list[tuple[str, list[str]]] = []

    async def outboxes_in_use(self, places: list[str], /) -> list[str]:
        return places

    async def outbox(self, place: str, /) -> dict[str, bytes]:
        return {}

    def ack_outbox(self, place: str, order_ids: list[str], /) -> asyncio.Future[Any]:
        self.acked.append((place, order_ids))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(len(order_ids))
        return done


def _hand_off(
    producer: FakeProducer, given_back: list[tuple[str, str, int]], give_back_fails: bool = False
) -> tuple[HandOff[str, int], FakeStore]:
    async def give_back(place: str, order_id: str, context: int) -> bool:
        if give_back_fails:
            raise ShardUnavailable("node", "down")
        given_back.append((place, order_id, context))
        return True

    store = FakeStore()
    outbox = Outbox("test outbox", "topic", store, lambda: [], VoucherReserved)
    # Duck-typed: a hand-off only calls send().
    return HandOff("test unit", outbox, cast(OrderProducer, producer), give_back), store


async def test_a_delivered_event_is_acked_and_nothing_goes_back() -> None:
    given_back: list[tuple[str, str, int]] = []
    producer = FakeProducer()
    hand_off, store = _hand_off(producer, given_back)
    carried = kafka_headers("o-1", None)
    await hand_off.send("code", "o-1", b"{}", 7, carried)
    await asyncio.sleep(0)  # the acks are flushed on the next loop tick
    assert producer.sent == [("topic", b"o-1", b"{}")]
    assert producer.headers == [carried]  # the request id goes with the message
    assert store.acked == [("code", ["o-1"])]
    assert given_back == []


@pytest.mark.parametrize("give_back_fails", [False, True])
async def test_a_never_sent_event_gives_its_unit_back(give_back_fails: bool) -> None:
    given_back: list[tuple[str, str, int]] = []
    hand_off, store = _hand_off(FakeProducer(NeverSent("queue full")), given_back, give_back_fails)
    with pytest.raises(Unavailable) as raised:
        await hand_off.send("code", "o-2", b"{}", 7)
    # A unit Redis could not take back is still held, its order sent later by the relay.
    assert raised.value.extra == ({"orderId": "o-2"} if give_back_fails else {})
    assert given_back == ([] if give_back_fails else [("code", "o-2", 7)])
    await asyncio.sleep(0)
    assert store.acked == []


async def test_an_unknown_outcome_keeps_the_hold_and_names_the_order() -> None:
    given_back: list[tuple[str, str, int]] = []
    hand_off, store = _hand_off(FakeProducer(OutcomeUnknown("timeout")), given_back)
    with pytest.raises(Unavailable) as raised:
        await hand_off.send("code", "o-3", b"{}", 7)
    assert raised.value.extra == {"orderId": "o-3"}
    assert given_back == []
    await asyncio.sleep(0)
    assert store.acked == []
