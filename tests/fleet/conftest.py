"""The fleet's tests need root (namespaces, nftables) and haproxy; they use the stack the root
conftest's ``live_stack`` brings up. Each module's fleet is a
private one (``fleet.private``: its own name, subnet and balancer port), so it never meets the
default fleet or another run's."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from flashsale.fleet import fleet
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from rig.sale import LIFTED_IP_LIMITS, running_writer
from tests.support.constants import REDIS_TIMEOUT_MS
from tests.support.tiers import server_fixture

GATEWAYS = 3
FLEET_ENV = settings_env(**LIFTED_IP_LIMITS, redis_timeout_ms=REDIS_TIMEOUT_MS)


@server_fixture(scope="module")
def live_stack(live_stack: Settings) -> Iterator[Settings]:
    if os.geteuid() != 0 or not shutil.which("haproxy") or not shutil.which("nft"):
        pytest.skip("the fleet needs root, haproxy and nftables (scripts/bootstrap)")
    with fleet.private(live_stack, "fst") as mine:
        yield mine


@contextmanager
def limited_fleet(cfg: Settings, gateways: int, env: dict[str, str]) -> Iterator[list[Host]]:
    """A fleet of ``gateways`` hosts with ``env`` (its limits), no writer."""
    try:
        yield fleet.up(cfg, gateways, env)
    finally:
        fleet.down(cfg)


@contextmanager
def running_fleet(cfg: Settings, gateways: int) -> Iterator[list[Host]]:
    """A fleet of ``gateways`` hosts, and a writer (a cancel needs the order stored)."""
    with running_writer():
        up = fleet.up(cfg, gateways, FLEET_ENV)
        try:
            yield up
        finally:
            fleet.down(cfg)


@pytest.fixture(scope="module")
def hosts(live_stack: Settings) -> Iterator[list[Host]]:
    with running_fleet(live_stack, GATEWAYS) as up:
        yield up
