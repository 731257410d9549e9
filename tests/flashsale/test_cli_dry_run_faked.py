"""--dry-run on voucher create, voucher arm, item --pause/--resume, expiry --once, stack down and
fleet down, in this process with the boundary faked (tests/support/cli_boundary.py): each prints
what the change would give, says on stderr that nothing changed, asks nothing, and makes no write
(a write is a test failure; a stop would end the test's own stand-in process)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shard_router
from domain import voucher_arm
from domain.voucher_arm import ArmedVoucher
from domain.vouchers import Voucher
from domain.warm_up import Hold
from flashsale.cli import voucher as voucher_cli
from kernel.settings import Settings
from shard_router import ShardState
from shard_router.vouchers import VoucherState
from tests.support.cli_boundary import Forbidden, fake_stack, run


def test_voucher_create_dry_run_prints_the_validated_voucher_and_touches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_stack(monkeypatch, Forbidden(), Forbidden())
    ran = run(capsys, "voucher", "create", "SPRING", "--flash", "--total", "5", "--dry-run")
    assert ran.status == 0, ran.err
    body = ran.json()
    assert (body["code"], body["totalLimit"], body["isFlash"]) == ("SPRING", 5, True)
    assert (body["discountAmount"], body["perCustomerLimit"]) == (100_000, 1)
    assert ran.err == "dry run: voucher SPRING not created; a flash one would be armed at once\n"
    refused = run(capsys, "voucher", "create", "SPRING", "--total", "-1", "-n")
    assert (refused.status, refused.err) == (2, "flashsale: --total: must be at least 0\n")


def _voucher(code: str) -> Voucher:
    now = dt.datetime.now(dt.UTC).timestamp()
    return Voucher(code, 500, 0, 5, 1, now - 60, now + 3600, True)


class _Store:
    """The voucher's Redis side: armed already, 3 uses left and 2 held."""

    def __init__(self, router: Any) -> None:
        pass

    async def state(self, code: str) -> VoucherState:
        return VoucherState(code, "127.0.0.1:7101", 3, 2, 2, 0, 0)


def test_voucher_arm_dry_run_computes_without_loading_and_asks_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dry_runs: list[bool] = []

    async def fetch_voucher(pool: Any, code: str) -> Voucher:
        return _voucher(code)

    async def arm_voucher(pool: Any, store: Any, code: str, *, dry_run: bool) -> ArmedVoucher:
        dry_runs.append(dry_run)
        return ArmedVoucher(code, 3, 2, 0)

    monkeypatch.setattr(voucher_cli, "fetch_voucher", fetch_voucher)
    monkeypatch.setattr(shard_router, "VoucherStore", _Store)
    monkeypatch.setattr(voucher_arm, "arm_voucher", arm_voucher)
    fake_stack(monkeypatch, Forbidden(), Forbidden())

    # Armed and live: arming asks (refused off a terminal without --yes); a dry run does not.
    asked = run(capsys, "voucher", "arm", "SPRING")
    assert asked.status == 2 and "pass --yes to go on" in asked.err
    assert dry_runs == []
    ran = run(capsys, "voucher", "arm", "SPRING", "--dry-run", "--json")
    assert ran.status == 0, ran.err
    assert ran.json() == {"code": "SPRING", "remaining": 3, "held": 2, "inFlight": 0}
    assert dry_runs == [True]
    assert "arming would ask: voucher SPRING is armed (3 uses left in Redis, 2 held)" in ran.err
    assert "dry run: voucher SPRING not armed" in ran.err


async def test_arming_a_voucher_dry_loads_nothing() -> None:
    """warm-up's one write is its stock's load: a dry run's load does not reach the store."""
    flash = voucher_arm._FlashVoucher(Forbidden(), Forbidden(), "SPRING", dry_run=True)
    await flash.load("SPRING", 3, [Hold("o-1", 7, "SPRING")])
    with pytest.raises(AssertionError, match="'load'"):  # the same call, not dry: it writes
        await voucher_arm._FlashVoucher(Forbidden(), Forbidden(), "SPRING").load("SPRING", 3, [])


class _Pool:
    """An item on sale now, not paused; any write fails the test."""

    async def fetchrow(self, query: str, item_id: int) -> dict[str, Any]:
        ends_at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        return {
            "sale_id": 9,
            "quantity": 10,
            "sold": 4,
            "shards": 2,
            "paused": False,
            "on_sale": True,
            "ends_at": ends_at,
        }

    async def execute(self, *args: Any) -> None:
        raise AssertionError(f"a dry run wrote: {args}")


class _Router:
    async def shard_states(self, item_id: int, shards: int) -> list[ShardState]:
        return [ShardState(k, f"127.0.0.1:710{k}", 3, 0, 0, 0) for k in range(shards)]


def test_item_pause_dry_run_shows_the_item_paused_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_stack(monkeypatch, _Pool(), _Router())
    ran = run(capsys, "item", "12", "--pause", "--dry-run", "--json")
    assert ran.status == 0, ran.err
    shown = ran.json()
    assert (shown["itemId"], shown["paused"], shown["unitsLeft"]) == (12, True, 6)
    assert "pausing would ask: item 12 is on sale now (sale 9" in ran.err
    assert ran.err.endswith("dry run: item 12 not paused\n")
    # Without --dry-run the same pause asks (and, off a terminal, refuses) before writing.
    assert run(capsys, "item", "12", "--pause").status == 2
    refused = run(capsys, "item", "12", "--dry-run")
    assert (refused.status, refused.err) == (
        2,
        "flashsale: --dry-run: only with --pause or --resume\n",
    )


class _DuePool(Forbidden):
    """Due now: two unpaid orders of item 42, one of item 7, one held use of SPRING. Only a
    read is answered; any write (or any other use of the pool) fails the test."""

    def __init__(self) -> None:
        self.read: list[str] = []

    async def fetch(self, query: str, *args: Any) -> list[dict[str, Any]]:
        assert query.lstrip().startswith("select"), f"a dry run wrote: {query}"
        assert "expires_at <= now()" in query  # due: past the window, as the pass selects
        self.read.append(query)
        if "from flash_sale_order" in query:
            return [{"item_id": 7, "due": 1}, {"item_id": 42, "due": 2}]
        assert "from voucher_redemption" in query, query
        return [{"voucher_code": "SPRING", "due": 1}]


def test_expiry_once_dry_run_names_what_is_due_and_expires_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = _DuePool()
    fake_stack(monkeypatch, pool, Forbidden())  # Redis: nothing given back, nothing read
    ran = run(capsys, "expiry", "--once", "--dry-run", "--json")
    assert ran.status == 0, ran.err
    assert ran.json() == {
        "expired": 4,
        "items": [{"itemId": 7, "orders": 1}, {"itemId": 42, "orders": 2}],
        "vouchers": [{"code": "SPRING", "uses": 1}],
    }
    assert ran.err == "dry run: nothing expired\n"
    assert len(pool.read) == 2  # one read of the orders, one of the uses
    text = run(capsys, "expiry", "--once", "-n")
    assert text.out == (
        "would expire 4 orders and voucher uses\n"
        "  item 7: 1 unpaid order(s) past their payment window\n"
        "  item 42: 2 unpaid order(s) past their payment window\n"
        "  voucher SPRING: 1 held use(s) past their hold window\n"
    )
    refused = run(capsys, "expiry", "--dry-run")
    assert (refused.status, refused.err) == (
        2,
        "flashsale: --dry-run: only with --once (a running expiry has no dry run)\n",
    )


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process of the test's own standing in for a server, ended by its PID afterwards."""
    proc = subprocess.Popen(["sleep", "60"])  # noqa: S607 - coreutils on PATH
    yield proc
    proc.kill()
    proc.wait()


def _state_in(monkeypatch: pytest.MonkeyPatch, cfg: Settings, state: Path) -> None:
    main = importlib.import_module("flashsale.cli.main")  # the package's `main` is the function
    monkeypatch.setattr(main, "settings", lambda: dataclasses.replace(cfg, state_dir=state))


def test_stack_down_dry_run_names_what_it_would_stop_and_stops_nothing(
    cfg: Settings,
    tmp_path: Path,
    sleeper: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = cfg.redis_nodes[0].rsplit(":", 1)[1]
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / f"redis-{port}.pid").write_text(f"{sleeper.pid}\nsleep\n")
    _state_in(monkeypatch, cfg, tmp_path)
    ran = run(capsys, "stack", "down", "--dry-run", "--json")
    assert ran.status == 0, ran.err
    assert ran.json() == {
        "stop": [{"part": "redis", "process": f"redis-{port}", "pid": sleeper.pid}]
    }
    assert ran.err == "dry run: nothing stopped (1 process(es) run)\n"
    text = run(capsys, "stack", "down", "-n").out
    assert text == f"stack: would stop redis: redis-{port} (pid {sleeper.pid})\n"
    assert sleeper.poll() is None  # still running
    assert (tmp_path / "pids" / f"redis-{port}.pid").exists()


def test_fleet_down_dry_run_names_what_it_would_stop_and_delete(
    cfg: Settings,
    tmp_path: Path,
    sleeper: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flashsale.fleet import fleet, namespaces

    pids = fleet.paths(dataclasses.replace(cfg, state_dir=tmp_path)).root / "pids"
    pids.mkdir(parents=True)
    (pids / "gw1.pid").write_text(f"{sleeper.pid}\nsleep\n")
    (pids / "gw2.pid").write_text("999999999\nsleep\n")  # gone: nothing to stop
    # The network as `ip` and `nft` would list it (reading it needs the fleet's privileges).
    monkeypatch.setattr(namespaces, "leftovers", lambda cfg: ["fsf-gw1", "fsf-br0"])
    _state_in(monkeypatch, cfg, tmp_path)
    ran = run(capsys, "fleet", "down", "--dry-run", "--json")
    assert ran.status == 0, ran.err
    assert ran.json() == {
        "stop": [{"name": "gw1", "pid": sleeper.pid}],
        "delete": ["fsf-gw1", "fsf-br0"],
    }
    assert ran.err == "dry run: nothing stopped or deleted\n"
    assert sleeper.poll() is None and (pids / "gw1.pid").exists()
