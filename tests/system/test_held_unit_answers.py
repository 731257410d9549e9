"""A buyer whose unit may have been taken is told its orderId, and can find the order after the
item is flagged sold out: a real gateway on the real Kafka and PostgreSQL, over a Redis Cluster
of the test's own (tests/shard_router/minicluster.py), whose replicas it pauses so that WAIT
cannot confirm, without touching the shared stack's nodes other tests are using."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.sale import LIFTED_IP_LIMITS
from tests.shard_router.minicluster import MiniCluster, mini_cluster
from tests.support.gateway import new_sale, running_gateway
from tests.support.system import fresh_buyers
from tests.support.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.faults]

HELD_UNIT_PORT = worker_port(18322)  # this module's gateway
RETRY_WITHIN_S = 15.0  # the breaker's cooldown and a probe, once the replicas are back


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    with mini_cluster(Path(tmp_path_factory.mktemp("held-unit"))) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def gateway(live_stack: Settings, mini: MiniCluster) -> Iterator[str]:
    env = settings_env(redis_nodes=mini.nodes, **LIFTED_IP_LIMITS)
    with running_gateway(live_stack, HELD_UNIT_PORT, **env) as base:
        yield base


def _buy(base: str, cfg: Settings, item_id: int, buyer: int) -> httpx.Response:
    return httpx.post(
        f"{base}/api/flash-sales/items/{item_id}/purchase",
        headers={"Authorization": f"Bearer {sign_token(cfg, buyer)}"},
        timeout=10,
    )


def test_a_503_after_an_unconfirmed_reservation_names_the_order_and_it_can_be_found_sold_out(
    gateway: str, live_stack: Settings, mini: MiniCluster
) -> None:
    item_id = new_sale(gateway, 2, 1)["items"][0]["itemId"]
    holder, second, loser = fresh_buyers(3)
    with ExitStack() as paused:
        for replica in mini.replicas:  # no replica can confirm: WAIT answers 0
            paused.enter_context(mini.paused(replica))
        refused = _buy(gateway, live_stack, item_id, holder)
    # The reservation ran on the primary: the unit is held, so the 503 names its order.
    assert refused.status_code == 503, refused.text
    assert refused.headers.get("Retry-After")
    order_id = refused.json().get("orderId")
    assert order_id, refused.text
    # While units remain, the holder's retry finds that order (after the breaker's cooldown).
    deadline = time.monotonic() + RETRY_WITHIN_S
    while (retry := _buy(gateway, live_stack, item_id, holder)).status_code == 503:
        assert time.monotonic() < deadline, retry.text
        time.sleep(0.2)
    assert retry.status_code == 409, retry.text
    assert retry.json() == {"error": "ALREADY_PURCHASED", "orderId": order_id}
    # The last unit sold, then a loser raises the sold-out flag.
    bought = _buy(gateway, live_stack, item_id, second)
    assert bought.status_code == 202, bought.text
    assert _buy(gateway, live_stack, item_id, loser).status_code == 410
    # The flag answers everyone 410 without reading a token (the 98%'s path stays free); the
    # holder finds the order by the orderId its 503 carried.
    assert _buy(gateway, live_stack, item_id, holder).status_code == 410
    order = httpx.get(
        f"{gateway}/api/flash-sales/orders/{order_id}",
        headers={"Authorization": f"Bearer {sign_token(live_stack, holder)}"},
        timeout=10,
    )
    assert order.status_code == 200, order.text
    assert order.json()["orderId"] == order_id and order.json()["itemId"] == item_id
    # And a holder who never saw any answer (its connection dropped after the unit was taken)
    # finds it by the item: only its own, nobody else's.
    by_item = _item_order(gateway, live_stack, item_id, holder)
    assert by_item.status_code == 200, by_item.text
    assert by_item.json()["orderId"] == order_id and by_item.json()["itemId"] == item_id
    others = _item_order(gateway, live_stack, item_id, second)
    assert others.status_code == 200, others.text
    assert others.json()["orderId"] == bought.json()["orderId"] != order_id
    nothing = _item_order(gateway, live_stack, item_id, loser)
    assert (nothing.status_code, nothing.json()) == (404, {"error": "ORDER_NOT_FOUND"})


def _item_order(base: str, cfg: Settings, item_id: int, buyer: int) -> httpx.Response:
    return httpx.get(
        f"{base}/api/flash-sales/items/{item_id}/order",
        headers={"Authorization": f"Bearer {sign_token(cfg, buyer)}"},
        timeout=10,
    )
