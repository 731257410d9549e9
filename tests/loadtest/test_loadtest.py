"""The load-testing kit: the locustfile loads with every scenario, its answer rules and buyer
ids hold, and a short spike through ``loadtest.scenarios.spike`` keeps every invariant and plots.

Locust patches the standard library with gevent, so it only ever runs in a subprocess here;
the modules imported below do not import it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernel.settings import PROJECT_ROOT, Settings
from loadtest.constants import LOCUSTFILE
from loadtest.scenarios import spike
from loadtest.scenarios.answers import PURCHASE, VOUCHER_RESERVE, Answer
from loadtest.scenarios.run import Process, Run, crowd_share

SCENARIOS = {"FlashSaleSpike", "SteadyShopper", "RetryStorm", "BotMix", "VoucherBurst"}


@pytest.mark.timeout(60)
def test_locustfile_defines_every_scenario() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--list"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert SCENARIOS <= {line.strip() for line in listed.stdout.splitlines()}


def answer(status: int, code: str = "", retry_after: int | None = None, **body: str) -> Answer:
    field = "status" if 200 <= status < 300 else "error"
    return Answer(status, code, {field: code, **body} if code else dict(body), retry_after)


def test_answer_rules() -> None:
    order_id = "00000000-0001-8abc-8def-0123456789ab"
    assert answer(202, "PENDING", orderId=order_id).problem(PURCHASE) is None
    assert answer(202, "PENDING").problem(PURCHASE) == "202 without an orderId"
    assert answer(410, "SOLD_OUT").problem(PURCHASE) is None
    assert answer(409, "ALREADY_PURCHASED", orderId=order_id).problem(PURCHASE) is None
    assert answer(409, "ALREADY_PURCHASED").problem(PURCHASE) is not None
    assert answer(429, "RATE_LIMITED").problem(PURCHASE) == "429 without Retry-After"
    assert answer(429, "RATE_LIMITED", retry_after=1).problem(PURCHASE) is None
    assert answer(503, "UNAVAILABLE", retry_after=1).problem(PURCHASE) is None
    assert answer(503, "UNAVAILABLE").problem(PURCHASE) == "503 without Retry-After"
    assert answer(500, "INTERNAL").problem(PURCHASE) == "unexpected 500 INTERNAL"
    assert answer(401, "UNAUTHORIZED").problem(PURCHASE) is not None
    assert answer(0).problem(PURCHASE) == "no answer"
    assert answer(201, orderId="o-1").problem(VOUCHER_RESERVE) is None
    assert answer(409, "OUT_OF_STOCK").problem(VOUCHER_RESERVE) is None
    assert answer(410, "SOLD_OUT").stat_name("purchase") == "purchase 410 SOLD_OUT"


def test_workers_get_disjoint_buyers_and_share_the_crowd(cfg: Settings) -> None:
    run = Run(item_id=1, voucher="", opens_at=0.0, buyers=1001, workers=3, id_base=2**24 - 1)
    processes = [Process(run, index, cfg) for index in range(3)]
    assert sum(p.crowd_left for p in processes) == 1001
    assert sorted(crowd_share(1001, 3, i) for i in range(3)) == [333, 334, 334]
    ids = [{p.new_user_id() for _ in range(1000)} for p in processes]
    assert not (ids[0] & ids[1] or ids[1] & ids[2] or ids[0] & ids[2])
    assert max(max(s) for s in ids) < 10**18  # the gateway takes an 18-digit sub at most
    buyer = processes[0].crowd_buyer()
    assert buyer is not None and buyer.token.count(".") == 2


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_short_spike_keeps_the_invariants(live_stack: Settings, tmp_path: Path) -> None:
    opts = spike.SpikeOptions(
        buyers=300, units=50, users=50, duration_s=30, opens_in_s=2, report_dir=tmp_path
    )
    result = spike.run(opts, live_stack)
    failed = [c for c in result.checks if not c.passed]
    assert not failed, failed
    assert {c.name for c in result.checks} >= {
        "units sold <= quantity",
        "every 202 is an order",
        "drift 0 after drain (reconcile)",
    }
    counts = result.outcome["purchase_counts"]
    assert 0 < counts["202"] <= 50
    assert counts["202"] + counts["409"] + counts["410"] + counts["503"] >= 300
    assert result.plot is not None and result.plot.stat().st_size > 10_000
    assert (tmp_path / "report.txt").exists()
