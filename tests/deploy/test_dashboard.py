"""The Grafana dashboard (deploy/grafana/flashsale.json) and the alert rules read only metrics the
processes really export: a gateway, a writer and a reconciliation job run a small sale, and
their /metrics pages (and the stack's redis_exporter's) are scraped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flashsale.stack.processes import wait_until
from kernel.settings import PROJECT_ROOT, Settings
from tests.deploy.promql import SYNTHETIC, exported, metrics_read, names_in, recording_rules
from tests.support.constants import DASHBOARD_PORT
from tests.support.observed import ObservedSale, buy, observed_sale, scrape

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "flashsale.json"
RULES = sorted((PROJECT_ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"]["query"].removeprefix("label_values(").split(",")[0])
    return queries


def alert_queries() -> list[str]:
    return [
        rule["expr"]
        for path in RULES
        for group in yaml.safe_load(Path(path).read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = list(_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    titles = " ".join(p["title"] for p in panels).lower()
    for must in ("outcome", "latency", "per shard", "writer lag", "drift"):  # the list
        assert must in titles


def test_the_dashboard_names_only_recording_rules_that_exist() -> None:
    rules = recording_rules(RULES)
    named = {n for q in dashboard_queries() for n in names_in(q) if ":" in n}
    assert named - set(rules) == set()


@pytest.fixture(scope="module")
def exported_now(live_stack: Settings) -> set[str]:
    """Every name the processes export during and after a small sale that sold out."""
    with observed_sale(live_stack, DASHBOARD_PORT, quantity=5, shards=2) as sale:
        statuses = buy(live_stack, sale, buyers=20)
        assert statuses[202] == 5, statuses
        _wait_for_the_round(sale)
        pages = [scrape(sale.gateway), scrape(sale.writer), scrape(sale.jobs)]
    exporter = f"127.0.0.1:{live_stack.redis_exporter_port}"
    for node in live_stack.redis_nodes:  # primaries and replicas export different series
        pages.append(scrape(exporter, f"/scrape?target=redis://{node}"))
    return set().union(*map(exported, pages))


def _wait_for_the_round(sale: ObservedSale) -> None:
    """Until the reconciliation has reported the item with its orders stored."""

    def reported() -> bool:
        page = scrape(sale.jobs)
        return f'flashsale_reconcile_holds{{item="{sale.item_id}",voucher=""}} 5.0' in page

    assert wait_until(reported, 60, interval=0.5), scrape(sale.jobs)

    def relayed() -> bool:  # the gateway's relay has run a round since: its gauge is set
        return "flashsale_outbox_entries{" in scrape(sale.gateway)

    assert wait_until(relayed, 30, interval=0.2), scrape(sale.gateway)


def test_every_dashboard_query_reads_exported_metrics(exported_now: set[str]) -> None:
    rules = recording_rules(RULES)
    read = {m for q in dashboard_queries() for m in metrics_read(q, rules)}
    assert read - exported_now - SYNTHETIC == set()


def test_every_alert_reads_exported_metrics(exported_now: set[str]) -> None:
    rules = recording_rules(RULES)
    read = {m for q in alert_queries() for m in metrics_read(q, rules)}
    assert read - exported_now - SYNTHETIC == set()
