"""--json on the commands that print state and had only text: ``watch`` (a line per refresh),
``fleet status``, ``stack up``, ``fleet up``, ``migrate``, ``expiry --once``; in this process
with the boundary faked (tests/support/cli_boundary.py), so the shapes are checked in the fast
tier."""

from __future__ import annotations

from pathlib import Path
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


def test_stack_up_json_is_stack_status_s_shape_and_the_progress_goes_to_stderr(
    cfg: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flashsale import migrate, stack

    def up(cfg: Settings) -> float:
        print("stack: redis ...", flush=True)  # as stack.up reports each part
        return 12.34

    monkeypatch.setattr(stack, "up", up)
    monkeypatch.setattr(migrate, "migrate", lambda cfg: ["0007"])
    monkeypatch.setattr(stack, "status", lambda cfg: {"redis": "9/9 nodes up, cluster_state:ok"})
    ran = run(capsys, "stack", "up", "--json")
    assert ran.status == 0, ran.err
    assert ran.out.count("\n") == 1  # one document, nothing else
    shown = ran.json()
    status = run(capsys, "stack", "status", "--json").json()
    assert shown == {**status, "tookSeconds": 12.3, "migrations": ["0007"]}
    assert status == {
        "parts": {"redis": "9/9 nodes up, cluster_state:ok"},
        "logDir": str(cfg.log_dir),
    }
    assert ran.err == "stack: redis ...\n"
    text = run(capsys, "stack", "up").out  # without --json, as before: progress, then the table
    assert text.startswith("stack: redis ...\nstack: up in 12.3s; migrations applied: 0007\n")


def test_fleet_up_json_is_fleet_status_s_rows_and_what_started_goes_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[dict[str, object]] = [
        {"name": "gw1", "address": "10.0.0.11:8000", "pid": 12, "ready": True, "balancer": "UP"},
        {"name": "haproxy", "address": "http://10.0.0.1:8080", "pid": 13, "ready": True},
    ]
    hosts: list[object] = []

    def up(cfg: Settings, gateways: int | None) -> list[object]:
        print("fleet: creating fsf-gw1 ...")  # anything printed on the way
        hosts.append(object())
        return list(hosts)

    monkeypatch.setattr(fleet, "current_hosts", lambda cfg: hosts)
    monkeypatch.setattr(fleet, "up", up)
    monkeypatch.setattr(fleet, "repair", lambda cfg, gateways: ["agent"])
    monkeypatch.setattr(fleet, "balancer_url", lambda cfg: "http://10.0.0.1:8080")
    monkeypatch.setattr(fleet, "status", lambda cfg: rows)
    ran = run(capsys, "fleet", "up", "--gateways", "1", "--json")
    assert ran.status == 0, ran.err
    assert ran.out.count("\n") == 1 and ran.json() == rows
    assert ran.json() == run(capsys, "fleet", "status", "--json").json()
    assert (
        ran.err
        == "fleet: creating fsf-gw1 ...\nfleet: 1 gateway hosts behind http://10.0.0.1:8080\n"
    )
    again = run(capsys, "fleet", "up", "--json")  # partly up: only what is missing starts
    assert (again.json(), again.err) == (rows, "fleet: started agent\n")


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


def test_report_json_sums_the_timeline_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from flashsale.observe import report
    from flashsale.observe.timeline import ItemLine, Timeline

    at = 1_796_000_000.0  # 2026-11-30T…Z
    found = Timeline(
        5,
        "drop",
        at,
        at + 60,
        1.0,
        [ItemLine(42, 20, {"PAID": 3, "PENDING": 17}, sold_out_db=at + 4.5)],
        "Prometheus http://prom:9090 and PostgreSQL",
        answered={"accepted": 20.0, "sold_out": 400.0},
        latency={"reservation p99": [(at, float("nan")), (at + 1, 0.004)]},
        writer_lag={"flashsale.orders": [(at, 3.0)], "flashsale.vouchers": [(at, float("nan"))]},
    )
    png = tmp_path / "sale-5.png"

    async def write_report(cfg: Settings, pool: Any, sale_id: int, out: Any) -> Any:
        assert sale_id == 5
        return found, png, ["report: sale 5 (drop)", f"  chart        {png}"]

    monkeypatch.setattr(report, "write_report", write_report)
    fake_stack(monkeypatch, Forbidden())
    shown = run(capsys, "report", "5", "--json").json()
    assert shown == {
        "saleId": 5,
        "name": "drop",
        "source": "Prometheus http://prom:9090 and PostgreSQL",
        "start": "2026-11-30T00:53:20Z",
        "end": "2026-11-30T00:54:20Z",
        "stepSeconds": 1.0,
        "answered": {"accepted": 20.0, "sold_out": 400.0},
        "items": [
            {
                "itemId": 42,
                "quantity": 20,
                "statuses": {"PAID": 3, "PENDING": 17},
                "soldOutAt": "2026-11-30T00:53:24.500000Z",
                "soldOutDb": "2026-11-30T00:53:24.500000Z",
                "soldOutRedis": None,
            }
        ],
        "latencyPeak": {"reservation p99": 0.004},
        "writerLagPeak": {"flashsale.orders": 3.0},  # a series of NaN only has no peak
        "chart": str(png),
    }
    assert run(capsys, "report", "5").out == f"report: sale 5 (drop)\n  chart        {png}\n"


def test_fairness_json_gives_the_measures_with_nan_as_null(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flashsale.observe import fairness

    found = fairness.Fairness(
        8,
        early=[(0, 2), (1, 1), (2, 3)],
        late=[],
        frontier=3,
        won_early=2,
        won_late=0,
        per_shard={0: (1, 2), 1: (1, 1)},
        per_address={"10.0.0.1": 2, "10.0.0.2": 1},
    )

    async def write_fairness(cfg: Settings, pool: Any, router: Any, sale_id: int, out: Any) -> Any:
        return found, "reports/sale-8-fairness.png", ["fairness of sale 8"]

    monkeypatch.setattr(fairness, "write_fairness", write_fairness)
    fake_stack(monkeypatch, Forbidden(), Forbidden())
    shown = run(capsys, "fairness", "8", "--json").json()
    assert shown == {
        "saleId": 8,
        "joinedEarly": 3,
        "joinedLate": 0,
        "frontier": 3,
        "rhoEarly": 0.5,
        "rhoLate": None,  # nobody joined late: nothing to rank
        "wonEarly": 2,
        "wonLate": 0,
        "perShard": [
            {"shard": 0, "winners": 1, "joiners": 2},
            {"shard": 1, "winners": 1, "joiners": 1},
        ],
        "addresses": 2,
        "mostTickets": [
            {"address": "10.0.0.1", "tickets": 2},
            {"address": "10.0.0.2", "tickets": 1},
        ],
        "chart": "reports/sale-8-fairness.png",
    }
