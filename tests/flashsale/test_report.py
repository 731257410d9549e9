"""``flashsale report SALE_ID`` after a small sale that sold out: the PNG is written and the
summary says what happened, from a Prometheus of the test's own and PostgreSQL, or from
PostgreSQL alone when Prometheus does not answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from flashsale.stack.processes import settings_env, wait_until
from kernel.settings import PROJECT_ROOT, Settings
from tests.support.constants import REPORT_PORT
from tests.support.observed import ObservedSale, buy, observed_sale, own_prometheus, scrape

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUANTITY = 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Sold(NamedTuple):
    cfg: Settings  # pointing at the test's Prometheus
    sale_id: int


@pytest.fixture(scope="module")
def sold(live_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sold]:
    """A sale of 20 units bought by 50 buyers over ~5 s, stored and reconciled, with a
    Prometheus that scraped it all; the settings pointing at that Prometheus."""
    with observed_sale(live_stack, REPORT_PORT, quantity=QUANTITY, shards=2) as sale:
        home = tmp_path_factory.mktemp("prometheus")
        with own_prometheus(sale.settings(live_stack), home) as cfg:
            answers = buy(live_stack, sale, buyers=50, pause_s=0.1)
            assert answers[202] == QUANTITY, answers
            assert wait_until(lambda: _reconciled(sale), 60, interval=0.5)
            wait_until(lambda: False, 3)  # three scrapes more: the tail of the timeline
            yield Sold(cfg, sale.sale_id)


def _reconciled(sale: ObservedSale) -> bool:
    holds = f'flashsale_reconcile_holds{{item="{sale.item_id}",voucher=""}} {QUANTITY}.0'
    return holds in scrape(sale.jobs)


def _report(sale_id: int, out: Path, prometheus_url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "flashsale", "report", str(sale_id), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, **settings_env(prometheus_url=prometheus_url)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert out.stat().st_size > 20_000  # four panels drawn, not an empty figure
    return done.stdout


def test_the_report_draws_the_sale_from_prometheus_and_the_database(
    sold: Sold, tmp_path: Path
) -> None:
    out = tmp_path / "report.png"
    url = sold.cfg.prometheus_url
    summary = _report(sold.sale_id, out, url)
    assert f"from Prometheus {url} and PostgreSQL" in summary
    assert re.search(r"answers\s+[\d,]+ \(.*accepted 20", summary), summary
    assert f"{QUANTITY} units, {QUANTITY} sold in the database (PENDING {QUANTITY})" in summary
    # The sell-out instant: the earlier of the database's and Prometheus's, both shown.
    when = r"\d\d:\d\d:\d\d\.\d{3} UTC"
    found = re.search(
        rf"sold out at ({when}), [\d.]+ s after the first order \(the last unit's reservation"
        rf" ({when}); Prometheus read 0 units left at ({when})\)",
        summary,
    )
    assert found, summary
    assert found[1] == min(found[2], found[3])
    assert re.search(r"reservation p99 peak [\d.]+ ms", summary), summary
    assert f"chart        {out}" in summary


def test_without_prometheus_the_report_comes_from_the_database(sold: Sold, tmp_path: Path) -> None:
    summary = _report(sold.sale_id, tmp_path / "report.png", "http://127.0.0.1:9")
    assert "from PostgreSQL only (Prometheus did not answer)" in summary
    assert re.search(
        r"sold out at ([\d:.]+) UTC, .* \(the last unit's reservation \1 UTC\)", summary
    )
    assert "answers" not in summary.split("\n", 2)[2]  # no rates without Prometheus
