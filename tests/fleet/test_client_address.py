"""Per-IP limits through the balancer (issue 14): each client host is counted by its own
address, and X-Forwarded-For is believed only from the balancer. The clients run in client
namespaces of the fleet (their own addresses on its bridge), with small per-IP buckets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from flashsale.fleet import fleet, namespaces
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import settings_env
from gateway.paths import purchase_path
from kernel.settings import Settings
from tests.support.constants import REDIS_TIMEOUT_MS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = 5
# The per-address bucket a purchase takes from before anything else (a purchase without a token
# answers 401 while it has tokens); the operations endpoints haproxy checks have their own.
LIMITED_ENV = settings_env(ip_rate_per_s=0.01, ip_burst=BURST, redis_timeout_ms=REDIS_TIMEOUT_MS)
NO_ITEM = purchase_path(999_999_999_999_999)

# Purchases from inside a client namespace, in order, each (url, forge X-Forwarded-For?), in
# one process; prints the statuses.
CLIENT = """
import json, sys, httpx
with httpx.Client(timeout=10) as c:
    print(json.dumps([
        c.post(url, headers={"X-Forwarded-For": f"198.51.100.{i}"} if forge else {}).status_code
        for i, (url, forge) in enumerate(json.loads(sys.argv[1]))
    ]))
"""


@pytest.fixture(scope="module")
def clients(live_stack: Settings) -> Iterator[list[Host]]:
    """A 1-gateway fleet with small per-IP buckets, and three client hosts on its bridge."""
    try:
        fleet.up(live_stack, 1, LIMITED_ENV)
        made = namespaces.clients(live_stack, 3)
        for host in made:
            namespaces.create_host(live_stack, host)
        yield made
    finally:
        fleet.down(live_stack)  # the client namespaces too: they carry the fleet's name


def _statuses(client: Host, *requests: tuple[str, bool]) -> list[int]:
    argv = ["ip", "netns", "exec", client.netns, sys.executable, "-c", CLIENT]
    done = subprocess.run(
        [*argv, json.dumps(requests)], capture_output=True, text=True, timeout=60, check=True
    )
    return list(json.loads(done.stdout))


def _balancer_inside(cfg: Settings) -> str:
    """The balancer as a client host reaches it (127.0.0.1 inside it maps to the host's)."""
    return f"http://127.0.0.1:{cfg.fleet_balancer_port}{NO_ITEM}"


def test_each_client_host_has_its_own_bucket_through_the_balancer(
    live_stack: Settings, clients: list[Host]
) -> None:
    first, second = clients[0], clients[1]
    answers = _statuses(first, *[(_balancer_inside(live_stack), False)] * (BURST + 1))
    assert answers == [401] * BURST + [429], answers  # the first host's own bucket, emptied
    # The second host is not the first, although both reach the gateway through one balancer.
    assert _statuses(second, (_balancer_inside(live_stack), False)) == [401]


def test_a_forged_forwarded_for_is_not_believed_at_a_gateway_or_through_the_balancer(
    live_stack: Settings, clients: list[Host]
) -> None:
    third = clients[2]
    gateway = f"{fleet.gateway_url(live_stack, fleet.current_hosts(live_stack)[0])}{NO_ITEM}"
    # Straight at the gateway, a fresh forged address each time: the peer is the client host,
    # not a trusted proxy, so every one of them is counted as that one host. Then through the
    # balancer, forging again: haproxy appends the real address and the gateway reads from the
    # right, so the host's bucket (empty now) answers, not a forged address's fresh one.
    answers = _statuses(
        third, *[(gateway, True)] * (BURST + 1), *[(_balancer_inside(live_stack), True)] * 2
    )
    assert answers == [401] * BURST + [429] * 3, answers
