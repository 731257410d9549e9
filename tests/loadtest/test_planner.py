"""The capacity planner's arithmetic (``loadtest.capacity.model``) and how it reads stored results
(``loadtest.capacity.plan.figures``): pure, no stack needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernel.settings import PROJECT_ROOT
from loadtest.capacity import model as capacity
from loadtest.capacity import plan
from loadtest.capacity.model import Figures, Latency, Measured, Target


def _lat(p50: float, p99: float) -> Latency:
    """Percentiles with p90 halfway between p50 and p99, p99.9 and max above p99."""
    return {50.0: p50, 90.0: (p50 + p99) / 2, 99.0: p99, 99.9: p99 * 1.5, 100.0: p99 * 2}


def _figures(**changes: Any) -> Figures:
    base: dict[str, Any] = {
        "soldout_us": Measured(50.0, "sold-out"),
        "reserve_us": Measured(500.0, "reserve"),
        "soldout_latency": {0.5: _lat(1.0, 2.0), 0.9: _lat(2.0, 5.0)},
        "reserve_latency": {0.5: _lat(10.0, 40.0), 0.9: _lat(40.0, 90.0)},
        "redis_ops": Measured(50_000.0, "redis"),
        "writer_rate": Measured(5_000.0, "writer"),
        "loadgen_rps": Measured(2_000.0, "locust"),
    }
    base.update(changes)
    return Figures(**base)


TARGET = Target(rps=500_000, sold_out_share=0.98, stock=10_000, items=1, p99_ms=100)


def test_ceil_div_rounds_up_but_not_on_float_noise() -> None:
    assert capacity.ceil_div(7, 2) == 4
    assert capacity.ceil_div(0.1 + 0.2, 0.3) == 1  # 1.0000000000000002 is one, not two
    assert capacity.ceil_div(0, 5) == 1  # never zero of anything
    with pytest.raises(ValueError):
        capacity.ceil_div(1, 0)


def test_interpolate_is_linear_inside_and_flat_outside() -> None:
    points = {0.5: 10.0, 0.9: 50.0}
    assert capacity.interpolate(points, 0.7) == pytest.approx(30.0)
    assert capacity.interpolate(points, 0.1) == 10.0
    assert capacity.interpolate(points, 1.0) == 50.0
    assert capacity.interpolate({}, 0.7) is None


def test_gateway_cores_weigh_the_two_paths_by_share() -> None:
    # 500k × (0.98 × 50 µs + 0.02 × 500 µs) = 500k × 59 µs = 29.5 cores
    assert capacity.gateway_cores(TARGET, _figures(), 0.7) == pytest.approx(29.5)


def test_the_cost_at_partial_load_comes_from_the_open_loop_runs_when_measured() -> None:
    # Sold-out 60 µs at 50% and 100 µs at 90% of the maximum: 80 µs at 70%;
    # 500k × (0.98 × 80 + 0.02 × 500) / 1e6 = 44.2 cores busy, ÷ 0.7 = 63.1 -> 64 processes.
    f = _figures(soldout_us_at={0.5: 60.0, 0.9: 100.0})
    assert capacity.gateway_cores(TARGET, f, 0.7) == pytest.approx(44.2)
    fleet = capacity.plan(TARGET, f)
    assert fleet.gateway_processes == 64
    assert any("open loop at 70%" in line for line in fleet.reasons)


def test_plan_for_the_issue_target() -> None:
    fleet = capacity.plan(TARGET, _figures())
    assert fleet.utilisation == pytest.approx(0.7)
    assert fleet.gateway_processes == 43  # ceil(29.5 / 0.7 = 42.1)
    assert fleet.p99_met
    # At 70%, the reserve path's p50 is 25 ms (10 → 40 ms between 50% and 90%): with 2% of the
    # requests on it and every sold-out answer far faster, half the reserve answers are the
    # slowest 1% of all, so the mix's p99 is the reserve path's median.
    assert fleet.predicted_p99_ms == pytest.approx(25.0, abs=0.01)
    assert fleet.shards_per_item == 1  # 10k calls/s < 35k/s per core
    assert fleet.redis_primaries == 1
    assert fleet.writers == 1  # 10k orders in 10 s = 1k/s < 3.5k/s
    assert fleet.kafka_partitions == 1
    assert fleet.loadgen_workers == 358  # ceil(500k / 1.4k = 357.1)
    assert len(fleet.reasons) >= 6


def test_hot_item_needs_more_shards_and_primaries_when_more_requests_reach_redis() -> None:
    target = Target(rps=500_000, sold_out_share=0.5, stock=10_000, items=1)
    fleet = capacity.plan(target, _figures())
    assert fleet.shards_per_item == 8  # 250k calls/s ÷ 35k/s = 7.1
    assert fleet.redis_primaries == 8


def test_shards_never_exceed_the_stock() -> None:
    target = Target(rps=500_000, sold_out_share=0.0, stock=3, items=1)
    assert capacity.plan(target, _figures()).shards_per_item == 3


def test_several_items_split_the_shards_not_the_primaries() -> None:
    target = Target(rps=500_000, sold_out_share=0.5, stock=10_000, items=4)
    fleet = capacity.plan(target, _figures())
    assert fleet.shards_per_item == 2  # 62.5k calls/s per item ÷ 35k/s
    assert fleet.redis_primaries == 8
    assert fleet.writers == 2  # 40k orders in 10 s = 4k/s > 3.5k/s


def test_tail_is_linear_between_percentiles() -> None:
    lat = {50.0: 10.0, 90.0: 20.0, 99.0: 40.0, 100.0: 80.0}
    assert capacity.tail(lat, 0.0) == 1.0
    assert capacity.tail(lat, 10.0) == pytest.approx(0.5)
    assert capacity.tail(lat, 15.0) == pytest.approx(0.3)
    assert capacity.tail(lat, 30.0) == pytest.approx(0.055)
    assert capacity.tail(lat, 1000.0) == 0.0


def test_mix_quantile_weighs_each_kind_by_its_share() -> None:
    fast = {50.0: 1.0, 90.0: 2.0, 99.0: 3.0, 99.9: 4.0, 100.0: 5.0}
    slow = {50.0: 50.0, 90.0: 100.0, 99.0: 200.0, 99.9: 300.0, 100.0: 400.0}
    assert capacity.mix_quantile([(1.0, slow)], 0.99) == pytest.approx(200.0, abs=0.01)
    assert capacity.mix_quantile([(0.98, fast), (0.02, slow)], 0.99) == pytest.approx(
        50.0, abs=0.01
    )
    # 10% slow: the slowest 1% of all is the slow kind's p90
    assert capacity.mix_quantile([(0.9, fast), (0.1, slow)], 0.99) == pytest.approx(100.0, abs=0.01)


def test_utilisation_drops_until_the_p99_target_is_met() -> None:
    # Reserve p50 = 20 + 180 (u - 0.5) / 0.4: 110 ms at 70%, 96.5 ms at 67%, and with 2% of the
    # requests on the reserve path, the mix's p99 is the reserve p50.
    f = _figures(reserve_latency={0.5: _lat(20.0, 300.0), 0.9: _lat(200.0, 900.0)})
    fleet = capacity.plan(TARGET, f)
    assert fleet.utilisation == pytest.approx(0.67)
    assert fleet.p99_met
    assert fleet.gateway_processes == 45  # ceil(29.5 / 0.67 = 44.03)


def test_a_target_below_the_half_load_p99_is_reported_not_met() -> None:
    f = _figures(reserve_latency={0.5: _lat(150.0, 300.0), 0.9: _lat(400.0, 900.0)})
    fleet = capacity.plan(TARGET, f)
    assert not fleet.p99_met
    assert fleet.utilisation == pytest.approx(0.5)  # never extrapolated below what was measured


def test_without_open_loop_figures_the_headroom_alone_decides() -> None:
    fleet = capacity.plan(TARGET, _figures(soldout_latency={}, reserve_latency={}))
    assert fleet.utilisation == pytest.approx(0.7)
    assert fleet.predicted_p99_ms is None


def test_shared_cores_rps_is_bounded_by_the_workers_and_by_the_machine() -> None:
    assert capacity.shared_cores_rps(50.0, 100.0, 2, 2) == pytest.approx(20_000)
    assert capacity.shared_cores_rps(50.0, 60.0, 1, 2) == pytest.approx(20_000)


def _run(section: str, scenario: str, subject: str, repeat: int, **metrics: Any) -> dict[str, Any]:
    return {
        "phase": section,
        "scenario": scenario,
        "subject": subject,
        "repeat": repeat,
        "metrics": metrics,
        "problems": [],
    }


def _open(p99: float, lag: float) -> dict[str, float]:
    return {
        "p50_ms": p99 / 4,
        "p90_ms": p99 / 2,
        "p99_ms": p99,
        "p999_ms": p99 * 2,
        "max_ms": p99 * 3,
        "dispatch_lag_p99_ms": lag,
    }


def _section(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"started_at": "2026-12-01 00:00:00", "runs": list(runs)}


def render_bench(results: Path, output: Path) -> str:
    """bench.md as ``python -m loadtest.bench --render`` writes it from ``results``."""
    argv = [sys.executable, "-m", "loadtest.bench", "--render", "--output", str(output)]
    argv += ["--results", str(results)]
    done = subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return output.read_text()


def write_sections(results: dict[str, Any], directory: Path) -> Path:
    """``results`` as the committed form: one ``<section>.json`` a section in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, section in results["sections"].items():
        (directory / f"{name}.json").write_text(json.dumps(section))
    return directory


def _results() -> dict[str, Any]:
    return {
        "sections": {
            "closed": _section(
                *(
                    _run("closed", "sold_out", "gateway", r, cpu_us_per_req=v)
                    for r, v in enumerate((40, 50, 60))
                ),
                *(
                    _run("closed", "reserve", "gateway", r, cpu_us_per_req=v)
                    for r, v in enumerate((400, 500, 900))
                ),
            ),
            "open": _section(
                _run("open", "sold_out@0.5", "gateway", 0, **_open(2.0, lag=0.1)),
                _run("open", "sold_out@0.9", "gateway", 0, **_open(9.0, lag=3.0)),
                _run("open", "reserve@0.5", "gateway", 0, **_open(20.0, lag=0.2)),
            ),
            "redis": _section(
                _run("redis", "redis", "cluster node :7101 (stack)|16", 0, ops_per_s=50_000),
                _run("redis", "redis", "cluster node :7101 (stack)|1", 0, ops_per_s=9_000),
            ),
            "writer": _section(_run("writer", "batch", "1000", 0, orders_per_s=5_000)),
            "loadgen": _section(_run("loadgen", "ceiling", "openloop", 0, rps=20_000)),
        },
    }


def test_figures_are_the_medians_of_the_stored_runs() -> None:
    f = plan.figures(_results())
    assert f.soldout_us.value == 50
    assert f.reserve_us.value == 500
    assert {f: lat[99.0] for f, lat in f.soldout_latency.items()} == {0.5: 2.0, 0.9: 9.0}
    assert f.reserve_latency == {0.5: {50.0: 5.0, 90.0: 10.0, 99.0: 20.0, 99.9: 40.0, 100.0: 60.0}}
    assert f.redis_ops is not None and f.redis_ops.value == 50_000  # the pipelined figure
    assert f.writer_rate is not None and f.writer_rate.value == 5_000
    # No Locust run: the open-loop generator stands in.
    assert f.loadgen_rps is not None and f.loadgen_rps.value == 20_000
    assert "open-loop" in f.loadgen_rps.source
    assert f.balancer is None  # no balancer section: no tier
    assert f.other_loadgen is not None and f.other_loadgen.value == 20_000
    assert "sold_out at 90%" in f.latency_source  # the generator lagged there: said so


def test_a_missing_section_names_the_command_that_measures_it() -> None:
    res = _results()
    del res["sections"]["writer"]
    with pytest.raises(plan.MissingFigure, match=r"writer orders/s .*section writer") as got:
        plan.figures(res)
    assert got.value.command == ".venv/bin/python -m loadtest.bench --only writer"
    del res["sections"]["closed"]  # no gateway cost anywhere either: both named, one command
    with pytest.raises(plan.MissingFigure) as got:
        plan.figures(res)
    assert got.value.command == ".venv/bin/python -m loadtest.bench --only closed,writer"


def test_the_planner_exits_non_zero_naming_the_sections_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write_sections({"sections": {"balancer": _balancer_section()}}, tmp_path / "sections")
    with pytest.raises(SystemExit) as got:
        plan.main(["--rps=500000", f"--results={results}"])
    message = str(got.value.code)
    assert "`.venv/bin/python -m loadtest.bench --only redis,writer,loadgen`" in message
    assert "not measured" not in message + capsys.readouterr().out


def _balancer_section() -> dict[str, Any]:
    """What the ``balancer`` section records (its scenario and metric names)."""
    b = "balancer"
    return _section(
        *(
            _run(b, "closed", "haproxy_410", r, balancer_cpu_us_per_req=v, cpu_us_per_req=v + 1)
            for r, v in enumerate((9.0, 10.0, 30.0))
        ),
        _run(b, "closed", "haproxy_gateway", 0, balancer_cpu_us_per_req=35.0),
        _run(b, "closed", "gateway", 0, cpu_us_per_req=30.0),
        _run(b, "reserve", "gateway", 0, cpu_us_per_req=300.0),
        _run(b, "open@0.5", "haproxy_410", 0, **_open(1.0, lag=0.1)),
        _run(b, "open@0.5", "gateway", 0, **_open(4.0, lag=0.1)),
        _run(b, "reserve-open@0.5", "gateway", 0, **_open(40.0, lag=0.1)),
    )


def test_the_balancer_section_answers_the_edge_without_closed_or_open() -> None:
    """Committed results with the balancer section and no closed or open section: the planner
    sizes the gateways and the balancer tier from it."""
    res = _results()
    del res["sections"]["closed"], res["sections"]["open"]
    res["sections"]["balancer"] = _balancer_section()
    f = plan.figures(res)
    assert f.soldout_us.value == 30.0 and "`balancer` section" in f.soldout_us.source
    assert f.reserve_us.value == 300.0
    assert f.reserve_latency[0.5][99.0] == 40.0
    assert f.balancer is not None
    assert f.balancer.answer_us.value == 10.0  # the median of 9, 10, 30: haproxy's share only
    assert f.balancer.forward_us.value == 35.0
    assert f.balancer.latency[0.5][99.0] == 1.0
    fleet = capacity.plan(TARGET, f)
    assert fleet.missing == []
    tier = fleet.tier
    assert tier is not None
    # 490k × 10 µs + 10k × 35 µs = 5.25 cores busy → ceil(5.25 / 0.7 = 7.5) = 8 balancer cores.
    assert tier.balancer_cores_busy == pytest.approx(5.25)
    assert tier.balancer_cores == 8
    # The gateways see the reserve path only: 10k × 300 µs = 3 cores → ceil(3 / 0.7) = 5.
    assert tier.gateway_cores_busy == pytest.approx(3.0)
    assert tier.gateway_processes == 5
    assert tier.edge_cores == 13
    # Without the tier, every sold-out answer costs the gateway 30 µs: 17.7 cores → 26.
    assert fleet.gateway_processes == 26
    rows = dict(plan.table(fleet, TARGET))
    assert rows["  edge cores (balancers + gateways)"] == "13"
    assert "not" not in rows["Redis primaries (+ a replica each)"]


def test_the_tier_p99_uses_the_balancers_own_latency_for_the_sold_out_share() -> None:
    """The same mix, sold-out answers at the balancer's 1 ms p99 instead of the gateway's:
    with 2% on the reserve path the mix's p99 is about the reserve path's median either way,
    but a reserve path whose median is above the target fails the tier as it fails the
    gateways alone."""
    slow = {0.5: _lat(150.0, 300.0)}
    b = capacity.BalancerFigures(Measured(10, "a"), Measured(35, "f"), {0.5: _lat(0.5, 1.0)})
    fleet = capacity.plan(TARGET, _figures(reserve_latency=slow, balancer=b))
    assert fleet.tier is not None and not fleet.tier.p99_met
    fast = capacity.plan(TARGET, _figures(balancer=b))
    assert fast.tier is not None and fast.tier.p99_met
    assert fast.tier.predicted_p99_ms is not None and fast.tier.predicted_p99_ms < 30


@pytest.mark.timeout(60)
def test_the_balancer_part_checks_each_tier_against_the_fleet_run(tmp_path: Path) -> None:
    """bench.md's balancer part: the fleet row predicts each tier's µs per answer from the
    single-process rows at the share the fleet run got, idle burn included."""
    section = _balancer_section()
    section["runs"].append(
        _run(
            "balancer", "closed", "haproxy_gateway", 1,
            balancer_cpu_us_per_req=35.0, gateway_cpu_us_per_req=50.0, cpu_us_per_req=85.0,
        )
    )  # fmt: skip
    fleet_run = _run(
        "balancer", "fleet", "fleet2", 0,
        share=0.9, rps=10_000.0, balancer_cpu_us_per_req=12.6, gateway_cpu_us_per_req=7.0,
        idle_balancer_cores=0.0, idle_gateway_cores=0.01, server_busy=0.2,
        cpu_us_per_req=19.6,
    )  # fmt: skip
    section["runs"].append(fleet_run)
    section.update(
        command="python -m loadtest.bench --only balancer",
        started_at="2026-12-01 00:00:00",
        finished_at="2026-12-01 00:10:00",
        commit="abc",
        clean=True,
        machine={
            "nproc": 2,
            "cpu_model": "x",
            "kernel": "6",
            "memory_gib": 8.0,
            "loadavg_start": 1.0,
            "loadavg_end": 2.0,
        },  # fmt: skip
        versions={"Python": "3.11"},
        settings={"repeats": 1, "connections": 64, "fraction": 0.5},
    )
    results = write_sections({"sections": {"balancer": section}}, tmp_path / "sections")
    page = render_bench(results, tmp_path / "bench.md")
    # Balancer: 0.9 × 10 + 0.1 × 35 = 12.5 µs predicted, 12.6 measured (1.01×); gateways:
    # 0.1 × 50 + 0.01 cores × 1e6 / 10,000 req/s = 6.0 µs predicted, 7.0 measured (1.17×).
    row = next(line for line in page.splitlines() if line.startswith("| 1 run(s)"))
    assert "| 90.0% | 12.5 | 12.6 | 1.01× " in row
    assert "| 6.0 | 7.0 | 1.17× " in row
    assert "haproxy answers 410 (item in its map) |" in page


def test_a_generator_bound_balancer_latency_is_not_used_for_the_tier_p99() -> None:
    section = _balancer_section()
    for run in section["runs"]:
        if run["subject"] == "haproxy_410" and run["scenario"] == "open@0.5":
            run["metrics"]["dispatch_lag_p99_ms"] = 30.0  # the generator, not haproxy, was late
    res = _results()
    res["sections"]["balancer"] = section
    f = plan.figures(res)
    assert f.balancer is not None and f.balancer.latency == {}
    tier = capacity.plan(TARGET, f).tier
    assert tier is not None and tier.predicted_p99_ms is None
    assert tier.gateway_utilisation == TARGET.headroom  # sized at the headroom, p99 unchecked
