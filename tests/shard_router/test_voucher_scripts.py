"""The voucher Lua scripts, called directly against the real cluster through VoucherStore."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from domain.vouchers import Outcome
from shard_router import VoucherStore, voucher_keys

pytestmark = pytest.mark.integration


@pytest.fixture
def store(voucher_store: VoucherStore) -> VoucherStore:
    return voucher_store  # tests/conftest.py's, by a shorter name


@pytest.fixture
async def code(store: VoucherStore) -> AsyncIterator[str]:
    code = f"lua-{uuid.uuid4().hex[:12]}"
    yield code
    await store.router.client.delete(*voucher_keys(code))


async def _reserve(
    store: VoucherStore, code: str, customer: int, order_id: str, limit: int = 1
) -> Outcome:
    return (await store.reserve(code, customer, order_id, limit, b"event")).outcome


async def test_reserve_checks_order_id_then_customer_then_uses(
    store: VoucherStore, code: str
) -> None:
    await store.load(code, 2, [], [])
    first = await store.reserve(code, 1, "o1", 1, b"event")
    assert (first.outcome, first.remaining) == (Outcome.RESERVED, 1)
    assert await _reserve(store, code, 1, "o1") is Outcome.REPLAY
    assert await _reserve(store, code, 2, "o1") is Outcome.ORDER_ID_CONFLICT
    assert await _reserve(store, code, 1, "o2") is Outcome.ALREADY_USED
    assert await _reserve(store, code, 2, "o3") is Outcome.RESERVED
    assert await _reserve(store, code, 3, "o4") is Outcome.OUT_OF_STOCK
    state = await store.state(code)
    assert (state.remaining, state.holds, state.customers, state.outbox) == (0, 2, 2, 2)
    assert await store.outbox(code) == {"o1": b"event", "o3": b"event"}
    assert await store.holds(code) == {"o1": 1, "o3": 2}


async def test_a_voucher_never_loaded_is_not_out_of_stock(store: VoucherStore, code: str) -> None:
    assert await _reserve(store, code, 1, "o1") is Outcome.NOT_LOADED


async def test_release_gives_one_use_back_once_and_the_order_id_stays_ended(
    store: VoucherStore, code: str
) -> None:
    await store.load(code, 1, [], [])
    assert await _reserve(store, code, 1, "o1") is Outcome.RESERVED
    assert await store.release(code, "o1") is True
    assert await store.release(code, "o1") is False
    state = await store.state(code)
    assert (state.remaining, state.holds, state.customers, state.outbox) == (1, 0, 0, 0)
    # A retry of the released orderId never takes the use again; a new orderId does.
    assert await _reserve(store, code, 1, "o1") is Outcome.ENDED
    assert await _reserve(store, code, 1, "o2") is Outcome.RESERVED


async def test_release_on_a_voucher_not_loaded_writes_nothing(
    store: VoucherStore, code: str
) -> None:
    await store.load(code, 0, [("o1", 1)], [])
    keys = voucher_keys(code)
    await store.router.client.delete(keys.remaining)  # lost, as after a failover or a flush
    assert await store.release(code, "o1") is False
    assert await store.release(code, "o1", ended=False) is False
    # No one-use voucher made up from nothing: it stays not loaded until it is armed again.
    assert await store.router.client.exists(keys.remaining) == 0
    assert await _reserve(store, code, 2, "o2") is Outcome.NOT_LOADED
    assert await store.holds(code) == {"o1": 1}


async def test_a_use_never_sent_may_be_retried_with_the_same_order_id(
    store: VoucherStore, code: str
) -> None:
    await store.load(code, 1, [], [])
    assert await _reserve(store, code, 1, "o1") is Outcome.RESERVED
    assert await store.release(code, "o1", ended=False) is True
    assert await _reserve(store, code, 1, "o1") is Outcome.RESERVED


async def test_per_customer_limit_counts_uses(store: VoucherStore, code: str) -> None:
    await store.load(code, 10, [], [])
    assert [await _reserve(store, code, 7, f"o{i}", limit=2) for i in range(3)] == [
        Outcome.RESERVED,
        Outcome.RESERVED,
        Outcome.ALREADY_USED,
    ]
    assert await store.release(code, "o0")
    assert await _reserve(store, code, 7, "o3", limit=2) is Outcome.RESERVED


async def test_load_rebuilds_holds_counts_and_ended(store: VoucherStore, code: str) -> None:
    await store.load(code, 3, [("a", 1), ("b", 1), ("c", 2)], [("gone", 1)])
    state = await store.state(code)
    assert (state.remaining, state.holds, state.customers, state.ended) == (3, 3, 2, 1)
    assert await _reserve(store, code, 1, "d", limit=2) is Outcome.ALREADY_USED
    assert await _reserve(store, code, 1, "gone", limit=3) is Outcome.ENDED
    assert await _reserve(store, code, 1, "a", limit=2) is Outcome.REPLAY


async def test_random_reserves_and_releases_keep_the_invariant(
    store: VoucherStore, code: str
) -> None:
    """Uses left + holds = total, and each customer's count = their holds, after every step."""
    total, limit = 5, 2
    await store.load(code, total, [], [])
    rng = random.Random(6)
    model: dict[str, int] = {}  # orderId -> customer, the holds we expect
    ended: set[str] = set()
    keys = voucher_keys(code)
    for step in range(300):
        order_id = f"o{rng.randrange(40)}"
        customer = rng.randrange(1, 6)
        if rng.random() < 0.6:
            outcome = await _reserve(store, code, customer, order_id, limit)
            if order_id in model:
                expected = (
                    Outcome.REPLAY if model[order_id] == customer else Outcome.ORDER_ID_CONFLICT
                )
            elif order_id in ended:
                expected = Outcome.ENDED
            elif Counter(model.values())[customer] >= limit:
                expected = Outcome.ALREADY_USED
            elif len(model) >= total:
                expected = Outcome.OUT_OF_STOCK
            else:
                expected = Outcome.RESERVED
                model[order_id] = customer
            assert outcome is expected, step
        else:
            released = await store.release(code, order_id)
            assert released is (model.pop(order_id, None) is not None), step
            ended.add(order_id)
        state = await store.state(code)
        assert state.remaining is not None and state.remaining + state.holds == total, step
        counts = await store.router.client.hgetall(keys.customers)
        assert {int(c): int(n) for c, n in counts.items()} == Counter(model.values()), step
