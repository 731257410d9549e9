"""A fault row: a Redis primary SIGKILLed mid-sale and restarted, then a second sale (with a
waiting room, open at once) created and armed right away, under the steady purchase load.

The gateway's pooled connections to the killed node are dead; redis-py, writing on one on the
gateway's uvloop loop, lets out "unable to perform operation on <TCPTransport closed=True>; the
handler is closed". Arm, and the waiting room's tick that follows it, must answer that as 503
with Retry-After (never 500), reconnect, and arm; and every invariant of the first sale holds.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass

import httpx
import pytest

from kernel.settings import Settings
from tests.faults.conftest import RATE, SHARDS, show
from tests.faults.redis_nodes import busiest_primary, heal, wait_promoted
from tests.support.system import System
from tests.support.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

PORT = worker_port(18413)  # a port of this row's own (the package's other rows use 18411-18412)
FAULT_AT_S = 4.0
DURATION_S = 40.0  # at most: the load ends SELLING_S after the second sale is armed
SELLING_S = 3.0
QUANTITY = 3000
ARMED_WITHIN_S = 20.0  # after the cluster is healthy again (409 NOT_READY_TO_ARM meanwhile)


@dataclass(frozen=True, slots=True)
class ArmAnswer:
    status: int
    error: str
    retry_after: str | None


def _new_room_sale(http: httpx.Client) -> int:
    now = time.time()
    body = {
        "name": "arm after failover",
        "startsAt": _iso(now - 1),
        "endsAt": _iso(now + 3600),
        "waitingRoom": {},
        "items": [{"productId": "sku", "quantity": 50, "price": 100, "shards": SHARDS}],
    }
    created = http.post("/admin/sales", json=body)
    assert created.status_code == 201, created.text
    return int(created.json()["saleId"])


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def _arm_until_armed(http: httpx.Client, sale_id: int) -> list[ArmAnswer]:
    """Arm, again after each refusal, until armed or out of time: every answer."""
    answers: list[ArmAnswer] = []
    deadline = time.monotonic() + ARMED_WITHIN_S
    while time.monotonic() < deadline:
        response = http.post(f"/admin/sales/{sale_id}/arm")
        try:
            body = response.json()
        except ValueError:
            body = {}
        error = str(body.get("error", "")) if isinstance(body, dict) else ""
        answers.append(ArmAnswer(response.status_code, error, response.headers.get("Retry-After")))
        if response.status_code == 200:
            break
        time.sleep(0.2)
    return answers


def test_arming_right_after_a_primary_was_killed_and_restored_never_answers_500(
    whole: Settings,
) -> None:
    cfg = whole
    with System(cfg, "redis-kill-then-arm", port=PORT) as system:
        sale = system.sale(QUANTITY, SHARDS)
        victim = busiest_primary(cfg, sale.item_id, SHARDS)
        load = system.load(sale, rate=RATE, duration_s=DURATION_S)
        load.sleep_until(FAULT_AT_S)
        os.kill(victim.pid(cfg), signal.SIGKILL)
        successor, promoted_s = wait_promoted(victim.replicas)
        heal(cfg)  # the victim back, as its successor's replica
        healed_at = load.now()
        headers = {"Authorization": f"Bearer {cfg.admin_token}"}
        with httpx.Client(base_url=system.bases[0], headers=headers, timeout=10) as http:
            second = _new_room_sale(http)
            arms = _arm_until_armed(http, second)
        armed_at = load.now()
        load.finish_at(armed_at + SELLING_S)
        answers = load.result()
        # (While the writer drains, the gateway's waiting room ticks the armed room.)
        report = system.check(sale, answers, calm_until_s=FAULT_AT_S)
        log = (cfg.log_dir / "faults-redis-kill-then-arm-gateway0.log").read_text()
    seen = Counter(f"{a.status} {a.error}".strip() for a in arms)
    show(
        report,
        f"victim {victim.address}: {successor} promoted {promoted_s:.1f}s after the kill, victim"
        f" back in sync at {healed_at:.1f}s; arm answers {dict(seen)}, armed"
        f" {armed_at - healed_at:.1f}s after the cluster was healthy",
    )
    assert arms[-1].status == 200, seen
    refused = [a for a in arms[:-1] if a.status >= 500]
    assert all(a.status == 503 and a.retry_after for a in refused), seen
    assert all(a.status in (409, 503) for a in arms[:-1]), seen
    assert "RuntimeError" not in log and "Traceback" not in log
    report.assert_kept()
