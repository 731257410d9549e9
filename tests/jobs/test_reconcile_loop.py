"""``flashsale reconcile --every``, as an operator runs it: a process that repairs what is safe
on sale each round and whose findings a Prometheus scrape of its /metrics reads."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request
from collections.abc import Iterator

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from domain.arm import arm_item
from flashsale.cli import main
from flashsale.stack.processes import process_group, settings_env
from kernel.settings import Settings
from rig.ports import free_port
from shard_router import ShardRouter, shard_keys
from tests.jobs.sales import make_item, store_order, users

pytestmark = pytest.mark.integration

SCRAPE_TIMEOUT_S = 60.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:  # noqa: S310
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _item(name: str, item: int) -> tuple[str, frozenset[tuple[str, str]]]:
    return f"flashsale_reconcile_{name}", frozenset({("item", str(item)), ("voucher", "")})


@pytest.fixture
def loop_port(live_stack: Settings) -> Iterator[int]:
    yield free_port()


async def test_reconcile_every_repairs_stale_holds_live_and_exports_what_it_found(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter, loop_port: int
) -> None:
    item = await make_item(db, 10, 2, paused=True)
    await arm_item(db, router, item)
    await db.execute("update flash_sale_item set paused = false where id = $1", item)
    # A stale hold: its order expired, its release never reached Redis.
    stale_user = next(users)
    stale = await store_order(db, item, stale_user, 0, "EXPIRED")
    keys = shard_keys(item, 0)
    await router.client.hset(keys.orders, stale, str(stale_user))
    await router.client.decr(keys.stock)
    # A lost hold: an active order whose hold a failover forgot (needs the item paused).
    await store_order(db, item, next(users), 1)
    await router.client.decr(shard_keys(item, 1).stock)

    argv = [sys.executable, "-m", "flashsale", "reconcile", "--every", "0.3", "--item", str(item)]
    env = settings_env(reconcile_metrics_port=loop_port)
    with process_group(argv, env=env) as proc:
        deadline = time.monotonic() + SCRAPE_TIMEOUT_S
        while True:
            assert proc.poll() is None, "reconcile --every exited"
            try:
                samples = await asyncio.to_thread(_scrape, loop_port)
            except OSError:
                samples = {}
            ok_rounds = samples.get(
                ("flashsale_reconcile_rounds_total", frozenset({("outcome", "ok")})), 0
            )
            if ok_rounds >= 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)

    assert ok_rounds >= 3, samples
    released = ("flashsale_reconcile_repairs_total", frozenset({("repair", "released_hold")}))
    assert samples[released] >= 1
    assert samples[_item("stale_holds", item)] == 0  # released live, round after round
    assert samples[_item("lost_units", item)] == 1  # reported, left for a paused --fix
    assert samples[_item("drift_units", item)] == 2  # lost, and its unit missing from Redis
    assert samples[_item("units_left", item)] == 9 and samples[_item("holds", item)] == 0
    assert samples[_item("failed_orders", item)] == 0
    assert stale not in await router.holds(item, 0)
    assert proc.returncode == 0  # SIGTERM ends it between rounds


def test_reconcile_every_is_not_combined_with_fix_or_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for flag in ("--fix", "--json"):
        assert main(["reconcile", "--every", "5", flag]) == 2
        assert f"--every: not with {flag}" in capsys.readouterr().err
    assert main(["reconcile", "--every", "0"]) == 2
    assert "--every: must be at least 0.1" in capsys.readouterr().err
