"""Distributed Locust across the fleet's hosts (issue 14): a master and two workers, each in a
client namespace of its own, run the spike through the balancer."""

from __future__ import annotations

import pytest

from flashsale.fleet import namespaces
from flashsale.fleet.namespaces import Host
from kernel.settings import Settings
from loadtest.scenarios.distributed import DistributedOptions, run_distributed

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_workers_on_their_own_hosts_buy_from_their_own_ranges(
    live_stack: Settings, hosts: list[Host], tmp_path_factory: pytest.TempPathFactory
) -> None:
    opts = DistributedOptions(
        workers=2,
        buyers=600,
        units=100,
        shards=2,
        users=20,
        duration_s=60,
        opens_in_s=3,
        report_dir=tmp_path_factory.mktemp("distributed"),
    )
    result = run_distributed(opts, live_stack)
    counts = result.outcome.get("purchase_counts")
    print(f"\norders per worker: {result.orders_by_worker}; purchase answers: {counts}")
    assert result.passed, [c for c in result.checks if not c.passed]
    # Each on its own host: three client namespaces, three addresses, all gone after the run.
    assert len({c.address for c in result.clients}) == 3
    assert not [n for n in namespaces.existing_namespaces(live_stack) if "-cl" in n]
    # The crowd over both workers: every unit sold, each worker a share of the winners.
    assert sum(result.orders_by_worker.values()) == 100
    assert set(result.orders_by_worker) == {0, 1}
