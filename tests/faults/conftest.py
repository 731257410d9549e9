"""Shared by the fault rows: every server the rows need healthy before a row starts, and the
row's figures printed (``pytest -s`` shows them) whether it passes or not."""

from __future__ import annotations

import pytest

from flashsale.migrate import migrate
from flashsale.stack.kafka import KafkaCluster
from flashsale.stack.postgres import Postgres
from flashsale.stack.redis_cluster import RedisCluster
from kernel.settings import Settings
from rig.invariants import render
from tests.support.system import Report
from tests.support.tiers import server_fixture
from tests.support.workers import worker_port

# This package: gateways on 18411 and 18412, the PostgreSQL proxy on 18421 (in worker 0).
FAULTS_PORT = worker_port(18411)
RATE = 200.0  # purchases per second: steady on 2 cores beside the whole stack
SHARDS = 4


@server_fixture(scope="session")
def migrated(cfg: Settings) -> Settings:
    Postgres(cfg).up()
    migrate(cfg)
    return cfg


@pytest.fixture
def whole(migrated: Settings) -> Settings:
    """The servers as a row expects them: a node a previous row killed is restarted, and each
    is healthy (Redis replicas linked, Kafka partitions in sync). Only the servers the rows
    fault: the rest of the stack (its observability) plays no part in them."""
    for part in (RedisCluster(migrated), KafkaCluster(migrated), Postgres(migrated)):
        part.up()
    return migrated


def show(report: Report, *notes: str) -> None:
    print("\n" + report.line())
    for note in notes:
        print(f"  {note}")
    print(render(report.checks))
