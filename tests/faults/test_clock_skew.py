"""Clock skew on one gateway (libfaketime, the wall clock only: the monotonic clock that drives
deadlines, buckets and caches stays true), under the whole system and a steady load.

As documented (docs/reliability.md): the sale opens by the server's clock, so each gateway opens
it when its own clock reaches ``startsAt``; and tokens are checked against that clock with
``jwt_leeway_seconds`` of leeway, so a token outside the leeway is rejected there. Units stay
exact whatever the clocks say: Redis decides.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import httpx
import jwt
import pytest

from kernel.settings import Settings
from tests.faults.conftest import FAULTS_PORT, RATE, SHARDS, show
from tests.support.system import GatewaySpec, System, fresh_buyers
from tests.support.system_load import Answer, purchase_path

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

SKEW_S = 30  # the skewed gateway's wall clock runs this far ahead
OPENS_IN_S = 6  # real seconds from the sale's creation to startsAt
DURATION_S = 14.0
QUANTITY = 4000  # never sold out: a sold-out flag answers 410 before any token check
EDGE_S = 0.5  # scheduling around the opening instant
PROBE_AT_S = 10.0
PROBE_TRIES = 5


# A probe's token claims, from the true clock at the moment it is signed. Each is this far
# from the leeway's edge as the skewed gateway sees it, so a slow answer cannot tip it over.
MARGIN_S = 4
Claims = Callable[[int, int], dict[str, int]]  # (true now, leeway) -> claims


def _stale(now: int, leeway: int) -> dict[str, int]:
    """exp in the true future, but past on the skewed clock by more than the leeway."""
    return {"exp": now + SKEW_S - leeway - MARGIN_S}


def _fresh(now: int, leeway: int) -> dict[str, int]:
    """exp past on the skewed clock, but within the leeway."""
    return {"exp": now + SKEW_S - leeway + MARGIN_S}


def _early(now: int, leeway: int) -> dict[str, int]:
    """nbf ahead of the true clock by more than the leeway, already past on the skewed one."""
    return {"exp": now + 3600, "nbf": now + leeway + MARGIN_S}


def _probe(system: System, gateway: int, item_id: int, claims: Claims) -> tuple[int, str | None]:
    """One buyer's purchase, retried after a 503 (load shed) as a buyer would, with a token
    signed just before each attempt."""
    buyer = fresh_buyers(1)[0]
    for _ in range(PROBE_TRIES):
        now, leeway = int(time.time()), system.cfg.jwt_leeway_seconds
        body = {"sub": str(buyer), "iat": now, **claims(now, leeway)}
        token = jwt.encode(body, system.cfg.jwt_secret, "HS256")
        answer = httpx.post(
            system.bases[gateway] + purchase_path(item_id),
            headers={"Authorization": f"Bearer {token}"},
            timeout=system.deadline_s,
        )
        if answer.status_code != 503:
            break
        time.sleep(float(answer.headers.get("Retry-After", "1")))
    return answer.status_code, answer.json().get("orderId")


def _of(answers: list[Answer], gateway: int, start_s: float, end_s: float) -> set[int]:
    return {a.status for a in answers if a.gateway == gateway and start_s <= a.due_s < end_s}


def test_a_gateway_with_a_skewed_clock_keeps_the_documented_window_and_token_checks(
    whole: Settings,
) -> None:
    if shutil.which("faketime") is None:
        pytest.fail("faketime is missing (Debian's faketime package; scripts/bootstrap)")
    skewed = GatewaySpec(
        env={"FAKETIME_DONT_FAKE_MONOTONIC": "1"}, prefix=("faketime", "-f", f"+{SKEW_S}s")
    )
    with System(whole, "clock-skew", port=FAULTS_PORT, gateways=[GatewaySpec(), skewed]) as system:
        sale = system.sale(QUANTITY, SHARDS, opens_in_s=OPENS_IN_S)
        load = system.load(sale, rate=RATE, duration_s=DURATION_S)
        opens_at = sale.starts_at - (time.time() - load.now())  # on the load's clock
        load.sleep_until(PROBE_AT_S)
        item = sale.item_id
        probes = {
            "true clock, exp past the skewed clock": _probe(system, 0, item, _stale),
            "skewed clock, exp past it beyond the leeway": _probe(system, 1, item, _stale),
            "skewed clock, exp past it within the leeway": _probe(system, 1, item, _fresh),
            "true clock, nbf ahead of it beyond the leeway": _probe(system, 0, item, _early),
        }
        answers = load.result()
        accepted = {order for status, order in probes.values() if status == 202 and order}
        report = system.check(sale, answers, accepted=accepted, calm_until_s=None)
    before_true = _of(answers, 0, 0, opens_at - EDGE_S)
    after_true = _of(answers, 0, opens_at + EDGE_S, DURATION_S)
    skewed_all = _of(answers, 1, 0, DURATION_S)
    show(
        report,
        f"opens at {opens_at:.1f}s (load clock); true-clock gateway before: {before_true},"
        f" after: {after_true}; skewed gateway (+{SKEW_S}s) throughout: {skewed_all}",
        *(f"probe {name}: {status}" for name, (status, _) in probes.items()),
    )
    report.assert_kept()
    # A 503 (deliberate, checked above) is load shed on this busy box, whatever the clock says.
    assert before_true - {503} == {403}, before_true  # SALE_NOT_OPEN by its own clock
    assert after_true <= {202, 410, 503} and 202 in after_true, after_true
    # The skewed clock reached startsAt SKEW_S early: that gateway sold from the start.
    assert skewed_all <= {202, 410, 503} and 202 in skewed_all, skewed_all
    statuses = [status for status, _ in probes.values()]
    assert statuses == [202, 401, 202, 401], probes
