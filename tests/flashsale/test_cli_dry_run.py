"""--dry-run on the commands that change state (sale create, sale arm, reconcile --fix, voucher
arm, item --pause, expiry --once): each prints what it would do and leaves PostgreSQL and Redis
as they were; and --version."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import uuid

import asyncpg
from redis.asyncio.cluster import RedisCluster

from kernel.settings import Settings
from shard_router import VoucherStore, shard_keys, voucher_keys
from tests.flashsale.test_cli import (
    _stale_hold,
    arm_when_ready,
    flash_voucher,
    flashsale,
    ok,
    refused,
)

__all__ = ["flash_voucher"]  # a fixture, used by name


def test_version_is_the_installed_distribution_s() -> None:
    run = ok(flashsale("--version"))
    assert run.out == f"flashsale {importlib.metadata.version('flashsale-gateway')}\n"


async def test_sale_create_dry_run_stores_nothing(db: asyncpg.Pool) -> None:
    name = f"dry {uuid.uuid4().hex[:12]}"
    run = ok(flashsale("sale", "create", "--name", name, "--quantity", "7", "--dry-run"))
    body = run.json()
    assert (body["name"], body["items"][0]["quantity"]) == (name, 7)
    assert "not created" in run.err
    assert await db.fetchval("select count(*) from flash_sale where name = $1", name) == 0
    # Validated as a real create is: a broken rule is still the usage error.
    refused(flashsale("sale", "create", "--quantity", "-1", "--dry-run"), 2)


async def test_sale_arm_dry_run_loads_nothing(db: asyncpg.Pool, redis: RedisCluster) -> None:
    created = ok(flashsale("sale", "create", "--quantity", "6", "--shards", "2")).json()
    sale_id, item_id = created["saleId"], created["items"][0]["itemId"]

    planned = ok(flashsale("sale", "arm", str(sale_id), "--dry-run"))
    assert f"item {item_id}: would load its 6 units (0 sold) from the database over 2" in (
        planned.out
    )
    assert f"dry run: sale {sale_id} not armed" in planned.err
    shown = ok(flashsale("sale", "arm", str(sale_id), "--dry-run", "--json")).json()
    assert (shown["saleId"], shown["armedAt"], len(shown["items"])) == (sale_id, None, 1)

    assert await db.fetchval("select armed_at from flash_sale where id = $1", sale_id) is None
    assert await redis.exists(shard_keys(item_id, 0).stock, shard_keys(item_id, 1).stock) == 0

    arm_when_ready("sale", "arm", str(sale_id))  # now on sale: a dry run meets arm's refusal
    line = refused(flashsale("sale", "arm", str(sale_id), "--dry-run"), 1)
    assert f"item {item_id} is on sale now" in line


async def test_reconcile_fix_dry_run_repairs_nothing(db: asyncpg.Pool, redis: RedisCluster) -> None:
    created = ok(flashsale("sale", "create", "--quantity", "8", "--starts-in", "-5")).json()
    arm_when_ready("sale", "arm", str(created["saleId"]))
    item_id = created["items"][0]["itemId"]
    await _stale_hold(redis, db, item_id)
    check = ["reconcile", "--item", str(item_id), "--json"]

    # On sale, --fix alone would ask (stdin is no terminal: refused); a dry run does not ask.
    dry = flashsale(*check, "--fix", "--dry-run")
    assert dry.status == 1, dry
    report = json.loads(dry.out)
    assert (report["drift"], report["fixed"], report["items"][0]["stale"]) == (1, False, 1)
    assert "dry run: --fix would release 1 stale hold(s)" in dry.err
    assert "nothing was changed" in dry.err
    assert flashsale(*check).json()["drift"] == 1  # still there

    line = refused(flashsale("reconcile", "--dry-run"), 2)
    assert "--dry-run: only with --fix" in line
    ok(flashsale(*check, "--fix", "--yes"))  # leave no drift behind for other tests


async def test_voucher_arm_dry_run_loads_nothing(
    flash_voucher: str, redis: RedisCluster, voucher_store: VoucherStore
) -> None:
    await redis.delete(voucher_keys(flash_voucher).remaining)  # as after a Redis loss
    planned = ok(flashsale("voucher", "arm", flash_voucher, "--dry-run", "--json")).json()
    assert (planned["code"], planned["remaining"]) == (flash_voucher, 5)
    assert (await voucher_store.state(flash_voucher)).remaining is None  # still not loaded
    arm_when_ready("voucher", "arm", flash_voucher)
    assert (await voucher_store.state(flash_voucher)).remaining == 5


async def test_item_pause_dry_run_leaves_it_selling(live_stack: Settings, db: asyncpg.Pool) -> None:
    created = ok(flashsale("sale", "create", "--quantity", "3")).json()
    item_id = created["items"][0]["itemId"]
    dry = ok(flashsale("item", str(item_id), "--pause", "--dry-run", "--json"))
    assert dry.json()["paused"] is True
    assert f"dry run: item {item_id} not paused" in dry.err
    assert await db.fetchval("select paused from flash_sale_item where id = $1", item_id) is False


async def _statuses(db: asyncpg.Pool, item_id: int, code: str) -> tuple[list[str], int, str, int]:
    """The item's order statuses and sold, the use's status and the voucher's used_count."""
    orders = await db.fetch(
        "select status from flash_sale_order where item_id = $1 order by user_id", item_id
    )
    sold = await db.fetchval("select sold from flash_sale_item where id = $1", item_id)
    use = await db.fetchval("select status from voucher_redemption where voucher_code = $1", code)
    used = await db.fetchval("select used_count from voucher where code = $1", code)
    return [r["status"] for r in orders], sold, use, used


async def test_expiry_dry_run_counts_what_the_pass_then_expires(db: asyncpg.Pool) -> None:
    # Stored as the writer stores them, a minute past their windows: two unpaid orders of an
    # item no sale armed (nothing of it in Redis) and a held use of an ordinary voucher.
    now = dt.datetime.now(dt.UTC)
    past, hour = now - dt.timedelta(minutes=1), dt.timedelta(hours=1)
    code = f"DRY-{uuid.uuid4().hex[:12]}"
    sale_id = await db.fetchval(
        "insert into flash_sale (name, starts_at, ends_at) values ($1, $2, $3) returning id",
        f"dry expiry {code}",
        now - hour,
        now + hour,
    )
    item_id = await db.fetchval(
        "insert into flash_sale_item (sale_id, product_id, price, quantity, sold, shards) "
        "values ($1, 'p', 1, 5, 2, 1) returning id",
        sale_id,
    )
    await db.executemany(
        "insert into flash_sale_order (id, item_id, user_id, shard, status, created_at, "
        "expires_at) values ($1, $2, $3, 0, 'PENDING', $4, $4)",
        [(uuid.uuid4(), item_id, 900 + n, past) for n in range(2)],
    )
    await db.execute(
        "insert into voucher (code, discount_amount, total_limit, used_count, starts_at, ends_at)"
        " values ($1, 100, 3, 1, $2, $3)",
        code,
        now - hour,
        now + hour,
    )
    await db.execute(
        "insert into voucher_redemption (voucher_code, order_id, customer_id, order_amount, "
        "discount_amount, status, reserved_at, expires_at) "
        "values ($1, $2, 7, 1000, 100, 'RESERVED', $3, $3)",
        code,
        str(uuid.uuid4()),
        past,
    )
    try:
        dry = ok(flashsale("expiry", "--once", "--dry-run", "--json"))
        shown = dry.json()
        assert {"itemId": item_id, "orders": 2} in shown["items"]
        assert {"code": code, "uses": 1} in shown["vouchers"]
        assert shown["expired"] >= 3  # (and any other test's due orders)
        assert dry.err == "dry run: nothing expired\n"
        text = ok(flashsale("expiry", "--once", "--dry-run")).out
        assert f"  item {item_id}: 2 unpaid order(s) past their payment window\n" in text
        assert await _statuses(db, item_id, code) == (["PENDING", "PENDING"], 2, "RESERVED", 1)

        ok(flashsale("expiry", "--once"))  # the pass ends what the dry run named
        assert await _statuses(db, item_id, code) == (["EXPIRED", "EXPIRED"], 0, "EXPIRED", 0)
        after = ok(flashsale("expiry", "--once", "--dry-run", "--json")).json()
        assert all(entry["itemId"] != item_id for entry in after["items"])
        assert all(entry["code"] != code for entry in after["vouchers"])
    finally:  # rows of this test only: no other test's reconcile meets them
        await db.execute("delete from flash_sale_order where item_id = $1", item_id)
        await db.execute("delete from flash_sale_item where id = $1", item_id)
        await db.execute("delete from flash_sale where id = $1", sale_id)
        orders = await db.fetch(
            "delete from voucher_redemption where voucher_code = $1 returning order_id", code
        )
        await db.execute(
            "delete from voucher_order where order_id = any($1::text[])",
            [r["order_id"] for r in orders],
        )
        await db.execute("delete from voucher where code = $1", code)
