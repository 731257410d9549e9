"""--json on the commands that print state and had only text: ``watch`` (a line per refresh),
``fleet status``, ``migrate``, ``expiry --once``; in this process with the boundary faked
(tests/support/cli_boundary.py), so the shapes are checked in the fast tier."""

from __future__ import annotations

from typing import Any

import pytest

from flashsale.fleet import fleet
from flashsale.observe import figures as figures_module
from flashsale.observe import state
from flashsale.observe.figures import Figures
from flashsale.observe.prom import Alert
from flashsale.observe.state import ItemView, SaleView, ShardView
from kernel.settings import Settings
from tests.support.cli_boundary import Forbidden, fake_stack, run


def _sale() -> SaleView:
    shards = [
        ShardView(0, "127.0.0.1:7101", 3, 2, 1, 11, 0),
        ShardView(1, "127.0.0.1:7102", None, None, None, 9, 1),  # Redis did not answer
    ]
    return SaleView(7, "spring", [ItemView(42, "sku-42", 30, 20, False, shards)], "Redis: down")


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A sale 7 whose figures count up per refresh; the refreshes' numbers, as they come."""
    refreshes: list[int] = []

    async def pick_sale(pool: Any, sale_id: int | None) -> int:
        assert sale_id in (None, 7)
        return 7

    async def sale_view(pool: Any, router: Any, sale_id: int) -> SaleView:
        return _sale()

    def figures_now(cfg: Settings, scraper: Any, items: list[int]) -> Figures:
        assert items == [42]
        refreshes.append(len(refreshes) + 1)
        return Figures(
            "Prometheus http://prom:9090",
            answers={"accepted": float(len(refreshes))},
            reservation=(0.001, None),
            routes={"/purchase": (0.002, 0.015)},
            writer_lag={"flashsale.orders": 250.0},
            findings={"42": {"drift_units": 2.0}},
            alerts=[Alert("FlashsaleLostUnits", "firing", {"item": "42"}, "1 lost")],
        )

    monkeypatch.setattr(state, "pick_sale", pick_sale)
    monkeypatch.setattr(state, "sale_view", sale_view)
    monkeypatch.setattr(figures_module, "figures_now", figures_now)
    fake_stack(monkeypatch, Forbidden(), Forbidden())
    return refreshes


def test_watch_json_streams_one_object_per_line_per_refresh(
    watched: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run(capsys, "watch", "--json", "--count", "2", "--interval", "1")
    assert ran.status == 0, ran.err
    first, second = ran.lines()
    assert watched == [1, 2]
    assert [first["figures"]["answers"], second["figures"]["answers"]] == [
        {"accepted": 1.0},
        {"accepted": 2.0},
    ]
    assert first["at"] < second["at"]  # RFC 3339 in UTC: text order is time order
    assert (first["saleId"], first["name"], first["redisError"]) == (7, "spring", "Redis: down")
    (item,) = first["items"]
    assert (item["itemId"], item["left"], item["holds"], item["sold"]) == (42, None, None, 20)
    assert item["shards"][0] == {
        "shard": 0,
        "node": "127.0.0.1:7101",
        "left": 3,
        "holds": 2,
        "outbox": 1,
        "soldDb": 11,
        "failedDb": 0,
    }
    assert item["shards"][1]["left"] is None
    shown = first["figures"]
    assert shown["reservation"] == {"p50": 0.001, "p99": None}
    assert shown["routes"] == {"/purchase": {"p50": 0.002, "p99": 0.015}}
    assert shown["writerLag"] == {"flashsale.orders": 250.0}
    assert shown["findings"] == {"42": {"drift_units": 2.0}}
    assert shown["alerts"] == [
        {
            "name": "FlashsaleLostUnits",
            "state": "firing",
            "labels": {"item": "42"},
            "summary": "1 lost",
        }
    ]
    assert shown["missing"] == []


def test_watch_json_once_is_one_line_and_unknown_alerts_are_null(
    watched: list[int], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        figures_module, "figures_now", lambda cfg, scraper, items: Figures("the pages")
    )
    ran = run(capsys, "watch", "--sale", "7", "--json", "--once")
    assert ran.status == 0, ran.err
    (only,) = ran.lines()
    assert (only["figures"]["source"], only["figures"]["alerts"]) == ("the pages", None)


def test_watch_without_json_off_a_terminal_prints_one_text_frame(
    watched: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run(capsys, "watch")
    assert ran.status == 0, ran.err
    assert "flashsale watch — sale 7 (spring)" in ran.out
    assert watched == [1]


def test_fleet_status_json_is_one_line_a_list_of_the_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[dict[str, object]] = [
        {"name": "gw1", "address": "10.0.0.11:8000", "pid": 12, "ready": True, "balancer": "UP"},
        {"name": "haproxy", "address": "http://10.0.0.1:8080", "pid": None, "ready": False},
    ]
    monkeypatch.setattr(fleet, "status", lambda cfg: rows)
    ran = run(capsys, "fleet", "status", "--json")
    assert ran.status == 0, ran.err
    assert ran.out.count("\n") == 1
    assert ran.json() == rows
    text = run(capsys, "fleet", "status").out
    assert "gw1" in text and "not ready" in text


def test_migrate_json_and_dry_run_apply_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flashsale import migrate

    applied: list[str] = []

    def apply(cfg: Settings) -> list[str]:
        applied.append("0007")
        return ["0007"]

    monkeypatch.setattr(migrate, "migrate", apply)
    monkeypatch.setattr(migrate, "pending", lambda cfg: ["0007"])
    dry = run(capsys, "migrate", "--dry-run", "--json")
    assert (dry.status, dry.json()) == (0, {"migrations": ["0007"], "applied": False})
    assert "dry run: no migration applied" in dry.err
    assert run(capsys, "migrate", "-n").out == "migrations pending: 0007\n"
    assert applied == []
    done = run(capsys, "migrate", "--json")
    assert (done.json(), applied) == ({"migrations": ["0007"], "applied": True}, ["0007"])


def test_expiry_once_json_counts_and_json_alone_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs import expiry

    async def expire_once(pool: Any, router: Any) -> int:
        return 3

    monkeypatch.setattr(expiry, "expire_once", expire_once)
    fake_stack(monkeypatch, Forbidden(), Forbidden())
    assert run(capsys, "expiry", "--once", "--json").json() == {"expired": 3}
    refused = run(capsys, "expiry", "--json")
    assert refused.status == 2
    assert refused.err == (
        "flashsale: --json: only with --once (a running expiry logs a line per round)\n"
    )
