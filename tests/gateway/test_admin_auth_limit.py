"""Failed admin authentication is limited: each wrong admin or service token takes one of its
client address's failure tokens; past the burst the address is answered 429 with Retry-After,
right token or not, while other addresses are untouched. No credentials guess nothing: 401."""

from __future__ import annotations

import uuid

import httpx

from kernel.settings import Settings
from rig.ports import free_port
from tests.support.gateway import ADMIN, running_gateway

BURST = 3
GUESSER, OPERATOR = "127.0.0.4", "127.0.0.5"  # loopback is all of 127/8


def _client(base: str, source: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=base, transport=transport, timeout=10)


def test_wrong_tokens_are_limited_per_address(live_stack: Settings) -> None:
    env = {"FLASHSALE_AUTH_FAILURE_BURST": str(BURST), "FLASHSALE_AUTH_FAILURE_RATE_PER_S": "0.01"}
    with running_gateway(live_stack, free_port(), **env) as base:
        item = f"/admin/items/{900_000_000 + uuid.uuid4().int % 1_000_000}"
        wrong = {"Authorization": "Bearer not-the-admin-token"}
        with _client(base, GUESSER) as guesser, _client(base, OPERATOR) as operator:
            assert [guesser.get(item).status_code for _ in range(BURST + 2)] == [401] * (BURST + 2)
            voucher = guesser.post(
                f"/vouchers/NOPE-{uuid.uuid4().hex[:8]}/reservations", headers=wrong
            )
            assert voucher.status_code == 401  # a wrong service token counts too
            answers = [guesser.get(item, headers=wrong) for _ in range(BURST - 1)]
            assert [a.status_code for a in answers] == [401] * (BURST - 1)

            refused = guesser.get(item, headers=wrong)
            assert refused.status_code == 429 and refused.json() == {"error": "RATE_LIMITED"}
            assert int(refused.headers["Retry-After"]) >= 1
            # Locked out: the right token is not even compared.
            assert guesser.get(item, headers=ADMIN).status_code == 429
            # Another address authenticates: the item does not exist, so 404 past the token.
            assert operator.get(item, headers=ADMIN).json() == {"error": "ITEM_NOT_FOUND"}
