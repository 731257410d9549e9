"""An operator re-arming a sale while buyers buy, as the whole system meets it: a gateway and a
writer (processes, on topics of this test's own), buyers over HTTP, arm called through the
admin API. Arming is refused (409 SALE_LIVE) while the item is on sale, and arming it paused
(the gateway still sells for up to a catalog refresh after the pause) keeps every reservation:
reconciliation finds nothing lost and no drift."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import aiohttp
import asyncpg
import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from jobs.reconcile import ItemReport, reconcile
from kernel.settings import Settings
from rig.http import client_session
from rig.sale import LIFTED_IP_LIMITS, running_writer
from shard_router import ShardRouter
from tests.jobs.sales import users
from tests.support.constants import QUICK_RELAY
from tests.support.gateway import ADMIN, new_sale, running_gateway
from tests.support.workers import worker_port
from tests.support.writer import Topics, topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PORT = worker_port(18331)  # this module's gateway (tests/support/constants.py keeps the others')
QUANTITY, SHARDS, BUYERS, ARMS = 30, 4, 40, 10
BUYING_S = 6.0  # buyers arrive over this long, while the arms run
SETTLE_S = 60.0


@pytest.fixture
async def own_topics(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as t:
        yield t


@pytest.fixture
def gateway(own_topics: Topics) -> Iterator[str]:
    cfg = own_topics.cfg
    stream = {
        "orders_topic": cfg.orders_topic,
        "deadletter_topic": cfg.deadletter_topic,
        "writer_group": cfg.writer_group,
    }
    with (
        running_writer(settings_env(writer_streams=("orders",), **stream)),
        running_gateway(
            cfg,
            PORT,
            **settings_env(orders_topic=cfg.orders_topic, **LIFTED_IP_LIMITS, **QUICK_RELAY),
        ) as base,
    ):
        yield base


async def _buy(http: aiohttp.ClientSession, cfg: Settings, item: int, user: int) -> tuple[int, str]:
    """Press Buy until the answer is final: 202 (or 409 with the orderId an earlier attempt
    took) or 410. A 403 (paused) and a 503 are pressed again, as a buyer would."""
    headers = {"Authorization": f"Bearer {sign_token(cfg, user)}"}
    for _ in range(300):
        async with http.post(f"/api/flash-sales/items/{item}/purchase", headers=headers) as r:
            status, body = r.status, await r.json()
        if status in (202, 409, 410):
            return status, body.get("orderId", "")
        assert status in (403, 429, 503), (status, body)
        # A buyer honours Retry-After on 429 (its per-buyer bucket), else presses again soon.
        await asyncio.sleep(float(r.headers.get("Retry-After", 1)) if status == 429 else 0.05)
    raise AssertionError(f"buyer {user} never got a final answer")


async def _arm(http: aiohttp.ClientSession, sale: int) -> tuple[int, str]:
    """POST arm; a NOT_READY_TO_ARM (another test restarting a Redis node) is tried again."""
    for _ in range(100):
        async with http.post(f"/admin/sales/{sale}/arm", headers=ADMIN) as r:
            status, body = r.status, await r.json()
        if body.get("error") != "NOT_READY_TO_ARM":
            return status, body.get("error", "")
        await asyncio.sleep(0.3)
    raise AssertionError("the cluster never became ready to arm")


async def _settled(cfg: Settings, db: asyncpg.Pool, router: ShardRouter, item: int) -> ItemReport:
    deadline = time.monotonic() + SETTLE_S
    while True:
        [report] = await reconcile(cfg, db, router, [item])
        if (report.drift == 0 and report.in_flight == 0) or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.5)


async def test_re_arming_a_live_sale_is_refused_and_arming_it_paused_loses_nothing(
    gateway: str, own_topics: Topics, db: asyncpg.Pool, router: ShardRouter
) -> None:
    cfg = own_topics.cfg
    sale = new_sale(gateway, QUANTITY, SHARDS)
    sale_id, item = sale["saleId"], sale["items"][0]["itemId"]
    rng = random.Random(item)
    arms: Counter[tuple[int, str]] = Counter()

    async def set_paused(paused: bool) -> None:
        await db.execute("update flash_sale_item set paused = $2 where id = $1", item, paused)

    async with client_session(gateway, limit=100) as http:

        async def buyer(user: int) -> tuple[int, str]:
            await asyncio.sleep(rng.random() * BUYING_S)
            return await _buy(http, cfg, item, user)

        async def operator() -> None:
            for _ in range(ARMS):
                arms[await _arm(http, sale_id)] += 1  # on sale: refused
                await set_paused(True)
                arms[await _arm(http, sale_id)] += 1  # paused: done, merged
                await set_paused(False)
                await asyncio.sleep(BUYING_S / ARMS)

        answers, _ = await asyncio.gather(
            asyncio.gather(*(buyer(next(users)) for _ in range(BUYERS))), operator()
        )

    assert arms == {(409, "SALE_LIVE"): ARMS, (200, ""): ARMS}
    statuses = Counter(status for status, _ in answers)
    won = {order_id for status, order_id in answers if status in (202, 409)}
    assert len(won) == QUANTITY and statuses[410] == BUYERS - QUANTITY, statuses
    report = await _settled(cfg, db, router, item)
    rows = await db.fetch(
        "select id::text as id, status from flash_sale_order where item_id = $1", item
    )
    # Every 202 is a stored order that is not FAILED, and nothing else was sold.
    assert {r["id"]: r["status"] for r in rows} == dict.fromkeys(won, "PENDING")
    assert (report.lost, report.drift, report.ghosts, len(report.stale)) == (0, 0, 0, 0), report
    assert (report.units_left, report.holds, report.sold) == (0, QUANTITY, QUANTITY)
    print(
        f"\nlive re-arm: {BUYERS} buyers, {ARMS} arms paused (+{ARMS} refused live): "
        f"answers {dict(statuses)}, orders {len(rows)}, lost {report.lost}, "
        f"drift {report.drift}"
    )
