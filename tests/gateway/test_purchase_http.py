"""The purchase endpoint through real HTTP, against the real gateway, Redis Cluster and Kafka."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

import aiohttp
import httpx
import jwt
import pytest

from flashsale import http_retry
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session
from tests.support.constants import PURCHASE_HTTP_PORT
from tests.support.gateway import ADMIN, new_sale, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Answer(NamedTuple):
    status_code: int
    body: Any

    def json(self) -> Any:
        return self.body


_users = itertools.count(uuid.uuid4().int % 10**12 * 1000)


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    # A generous per-IP bucket: every test buyer comes from 127.0.0.1.
    with running_gateway(
        live_stack,
        PURCHASE_HTTP_PORT,
        FLASHSALE_IP_RATE_PER_S="1000000",
        FLASHSALE_IP_BURST="1000000",
    ) as base:
        yield base


async def _race(base: str, cfg: Settings, item_id: int, user_ids: list[int]) -> list[Answer]:
    """Every buyer presses Buy at once (aiohttp: httpx's client adds ~30 ms a request here)."""
    tokens = [sign_token(cfg, u) for u in user_ids]
    timeout = aiohttp.ClientTimeout(total=30)
    async with client_session(base, limit=200, timeout=timeout) as session:

        async def buy(token: str) -> Answer:
            headers = {"Authorization": f"Bearer {token}"}
            path = f"/api/flash-sales/items/{item_id}/purchase"
            status, body, _ = await http_retry.answer(session, "POST", path, headers)
            return Answer(status, json.loads(body))

        return list(await asyncio.gather(*(buy(t) for t in tokens)))


def _counters(base: str, item_id: int) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(f"{base}/admin/items/{item_id}", headers=ADMIN).json()
    return result


async def test_1000_buyers_race_for_100_units_over_4_shards(
    gateway: str, live_stack: Settings
) -> None:
    item_id = new_sale(gateway, 100, 4)["items"][0]["itemId"]
    users = [next(_users) for _ in range(1000)]
    answers = await _race(gateway, live_stack, item_id, users)
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {202: 100, 410: 900}, statuses
    for answer in answers:
        if answer.status_code == 202:
            body = answer.json()
            assert body["status"] == "PENDING" and uuid.UUID(body["orderId"])
        else:
            assert answer.json() == {"error": "SOLD_OUT"}
    counters = _counters(gateway, item_id)
    assert [s["stock"] for s in counters["shards"]] == [0, 0, 0, 0]
    winner = users[[a.status_code for a in answers].index(202)]
    again = httpx.post(
        f"{gateway}/api/flash-sales/items/{item_id}/purchase",
        headers={"Authorization": f"Bearer {sign_token(live_stack, winner)}"},
    )
    assert again.status_code in (409, 410)
    if again.status_code == 409:
        assert again.json()["error"] == "ALREADY_PURCHASED"


async def test_skewed_ids_still_sell_exactly_the_quantity(
    gateway: str, live_stack: Settings
) -> None:
    item_id = new_sale(gateway, 60, 4)["items"][0]["itemId"]
    base = next(_users) * 4
    users = [base + 4 * i for i in range(300)]  # every id a multiple of 4: all home on shard 0
    answers = await _race(gateway, live_stack, item_id, users)
    assert Counter(a.status_code for a in answers) == {202: 60, 410: 240}
    counters = _counters(gateway, item_id)
    assert counters["unitsLeft"] == 0


async def test_double_clicks_by_one_buyer_take_at_most_one_unit(
    gateway: str, live_stack: Settings
) -> None:
    item_id = new_sale(gateway, 10, 4)["items"][0]["itemId"]
    user = next(_users)
    answers = await _race(gateway, live_stack, item_id, [user] * 8)
    codes = Counter(a.status_code for a in answers)
    assert codes[202] == 1, codes
    assert set(codes) <= {202, 409, 429}
    order_id = next(a.json()["orderId"] for a in answers if a.status_code == 202)
    conflicts = [a.json() for a in answers if a.status_code == 409]
    assert all(c == {"error": "ALREADY_PURCHASED", "orderId": order_id} for c in conflicts)
    assert _counters(gateway, item_id)["unitsLeft"] == 9


def _forge(payload: dict[str, object], header: dict[str, object]) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part(header)}.{part(payload)}."


def test_bad_tokens_get_401_and_take_nothing(gateway: str, live_stack: Settings) -> None:
    item_id = new_sale(gateway, 5, 2)["items"][0]["itemId"]
    exp = int(time.time()) + 600
    cases = {
        "none": None,
        "malformed": "Bearer not.a.jwt",
        "not bearer": "Basic abc",
        "expired": "Bearer " + sign_token(live_stack, 1, ttl_seconds=-60),
        "wrong signature": "Bearer "
        + jwt.encode({"sub": "1", "exp": exp}, "x" * 64, algorithm="HS256"),
        "alg none": "Bearer " + _forge({"sub": "1", "exp": exp}, {"alg": "none", "typ": "JWT"}),
        "missing sub": "Bearer "
        + jwt.encode({"exp": exp}, live_stack.jwt_secret, algorithm="HS256"),
        "non-integer sub": "Bearer "
        + jwt.encode({"sub": "bob", "exp": exp}, live_stack.jwt_secret, algorithm="HS256"),
        "missing exp": "Bearer "
        + jwt.encode({"sub": "1"}, live_stack.jwt_secret, algorithm="HS256"),
        "HS512 not configured": "Bearer "
        + jwt.encode({"sub": "1", "exp": exp}, live_stack.jwt_secret, algorithm="HS512"),
    }
    for name, header in cases.items():
        headers = {} if header is None else {"Authorization": header}
        answer = httpx.post(f"{gateway}/api/flash-sales/items/{item_id}/purchase", headers=headers)
        assert answer.status_code == 401, name
        assert answer.json() == {"error": "UNAUTHORIZED"}, name
    assert _counters(gateway, item_id)["unitsLeft"] == 5


def test_unknown_item_closed_sale_and_bad_admin_token(gateway: str, live_stack: Settings) -> None:
    token = {"Authorization": f"Bearer {sign_token(live_stack, 1)}"}
    for path in ("999999999", "abc", "-1"):
        answer = httpx.post(f"{gateway}/api/flash-sales/items/{path}/purchase", headers=token)
        assert (answer.status_code, answer.json()) == (404, {"error": "ITEM_NOT_FOUND"})
    later = new_sale(gateway, 5, 2, opens_in_s=3600)["items"][0]["itemId"]
    answer = httpx.post(f"{gateway}/api/flash-sales/items/{later}/purchase", headers=token)
    assert (answer.status_code, answer.json()) == (403, {"error": "SALE_NOT_OPEN"})
    assert httpx.post(f"{gateway}/admin/sales", json={}).status_code == 401
    bad = httpx.post(f"{gateway}/admin/sales", headers=ADMIN, content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"] == "INVALID_REQUEST"


async def test_order_status_is_pending_then_visible_only_to_its_buyer(
    gateway: str, live_stack: Settings
) -> None:
    item_id = new_sale(gateway, 3, 2)["items"][0]["itemId"]
    user = next(_users)
    [answer] = await _race(gateway, live_stack, item_id, [user])
    order_id = answer.json()["orderId"]
    mine = httpx.get(
        f"{gateway}/api/flash-sales/orders/{order_id}",
        headers={"Authorization": f"Bearer {sign_token(live_stack, user)}"},
    )
    assert mine.status_code == 200
    assert mine.json()["status"] == "PENDING" and mine.json()["itemId"] == item_id
    theirs = httpx.get(
        f"{gateway}/api/flash-sales/orders/{order_id}",
        headers={"Authorization": f"Bearer {sign_token(live_stack, user + 1)}"},
    )
    assert theirs.status_code == 404
