"""The balancer as the public edge of 2 gateways: one buyer's bucket (FLASHSALE_USER_RATE_PER_S,
FLASHSALE_USER_BURST) is the documented one for the fleet as a whole, not one per gateway, and
another buyer's is its own."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from flashsale.fleet import fleet
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import settings_env
from gateway.errors import RateLimited
from gateway.responses import encode
from kernel.settings import Settings
from rig.http import client_session
from rig.sale import LIFTED_IP_LIMITS
from tests.fleet.buyers import buy_new, buy_noting_refusals, users
from tests.fleet.conftest import limited_fleet
from tests.support.constants import REDIS_TIMEOUT_MS
from tests.support.gateway import new_sale

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GATEWAYS = 2
RATE_PER_S, BURST = 1.0, 10
LIMITED_ENV = settings_env(
    **LIFTED_IP_LIMITS,  # one address sends all of it: only the buyer buckets may refuse
    user_rate_per_s=RATE_PER_S,
    user_burst=BURST,
    redis_timeout_ms=REDIS_TIMEOUT_MS,
)
GREEDY_PER_S, QUIET_PER_S = 50, 2  # the quiet buyer never needs more than its own bucket
OFFERED_S = 3.0


@pytest.fixture(scope="module")
def pair(live_stack: Settings) -> Iterator[list[Host]]:
    with limited_fleet(live_stack, GATEWAYS, LIMITED_ENV) as hosts:
        yield hosts


async def _offer(
    cfg: Settings, item_id: int, greedy: int, quiet: int
) -> tuple[Counter[int], Counter[int], float, list[bytes]]:
    """Two buyers' purchases of one item, open loop, at GREEDY_PER_S and QUIET_PER_S: each one's
    statuses (its first 202, then 409 ALREADY_PURCHASED, or 429), the span from the first send
    to the last, and the 429 bodies."""
    refusals: list[bytes] = []
    async with client_session(fleet.balancer_url(cfg)) as session:
        sends = sorted(
            [(n / GREEDY_PER_S, greedy) for n in range(int(GREEDY_PER_S * OFFERED_S))]
            + [(n / QUIET_PER_S, quiet) for n in range(int(QUIET_PER_S * OFFERED_S))]
        )
        tasks: list[tuple[int, asyncio.Task[int]]] = []
        start = time.monotonic()
        for at, user in sends:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            bought = buy_noting_refusals(session, cfg, item_id, user, refusals)
            tasks.append((user, asyncio.create_task(bought)))
        span = time.monotonic() - start
        answered = [(user, await task) for user, task in tasks]
    by = {u: Counter(s for who, s in answered if who == u) for u in (greedy, quiet)}
    return by[greedy], by[quiet], span, refusals


async def test_one_buyer_gets_the_documented_bucket_through_two_gateways(
    live_stack: Settings, pair: list[Host]
) -> None:
    cfg = live_stack
    item_id = new_sale(fleet.gateway_url(cfg, pair[0]), 10_000, 4)["items"][0]["itemId"]
    for host in pair:  # armed in each gateway's cache (other buyers: not the two below)
        answer = buy_new(cfg, fleet.gateway_url(cfg, host), item_id, next(users))
        assert answer.status_code == 202, answer.text
    greedy, quiet = next(users), next(users)
    statuses, others, span, refusals = await _offer(cfg, item_id, greedy, quiet)
    through = sum(n for status, n in statuses.items() if status != 429)
    allowed = BURST + RATE_PER_S * span
    print(
        f"\none buyer, {GATEWAYS} gateways: {dict(statuses)}; bucket allows {allowed:.1f}; "
        f"another buyer: {dict(others)}"
    )
    assert set(statuses) == {202, 409, 429} and statuses[202] == 1, statuses
    assert BURST <= through <= allowed + 1, statuses  # +1: the span is measured after the sends
    assert set(refusals) == {encode(RateLimited(retry_after=1).body())}
    # The other buyer, at the same time through the same balancer and address, was never
    # refused: its bucket is its own.
    assert others[202] == 1 and set(others) == {202, 409}, others
