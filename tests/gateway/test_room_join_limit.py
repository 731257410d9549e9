"""Joins of a waiting room per client address have their own bucket: one address cannot join
a crowd of buyer ids, while another address (another household) still joins. Real gateway, real
stack; the two addresses are loopback sources the client binds."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.admin import create_sale
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS
from tests.support.gateway import running_gateway

pytestmark = [pytest.mark.integration]

BURST = 5
_users = itertools.count(uuid.uuid4().int % 10**12 * 1000 + 9 * 10**14)
FARM, HOUSEHOLD = "127.0.0.4", "127.0.0.5"  # loopback is all of 127/8


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    env = settings_env(
        **{
            **LIFTED_IP_LIMITS,
            # A refill this slow gives back no token within the test.
            "waiting_room_join_address_rate_per_s": 0.01,
            "waiting_room_join_address_burst": BURST,
        }
    )
    with running_gateway(live_stack, free_port(), **env) as base:
        yield base


def _join(base: str, cfg: Settings, sale: int, source: str, buyer: int) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=base, transport=transport, timeout=10) as client:
        return client.post(
            f"/api/flash-sales/sales/{sale}/queue",
            headers={"Authorization": f"Bearer {sign_token(cfg, buyer)}"},
        )


def test_one_address_cannot_join_a_crowd_of_buyer_ids(gateway: str, live_stack: Settings) -> None:
    sale = create_sale(
        gateway, live_stack, units=10, shards=1, opens_at=time.time() + 3600, waiting_room=True
    ).sale_id
    farm = [_join(gateway, live_stack, sale, FARM, next(_users)) for _ in range(BURST * 4)]
    statuses = [a.status_code for a in farm]
    assert statuses[:BURST] == [200] * BURST, [a.text for a in farm[:BURST]]
    refused = farm[BURST:]
    assert all(a.status_code == 429 for a in refused), statuses
    assert all(a.json() == {"error": "RATE_LIMITED"} for a in refused)
    assert all(int(a.headers["retry-after"]) >= 1 for a in refused)
    # Another address is another bucket.
    assert _join(gateway, live_stack, sale, HOUSEHOLD, next(_users)).status_code == 200
