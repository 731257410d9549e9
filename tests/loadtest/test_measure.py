"""The benchmarks' measurement toolkit (``loadtest.measure``): one percentile definition, CPU by
process group, a child's result line."""

from __future__ import annotations

import os
import sys

import pytest

from loadtest.measure import child, cpu, latency


def test_percentiles_of_1_to_100_are_their_nearest_rank_to_three_digits() -> None:
    found = latency.of_ms(float(v) for v in range(1, 101))
    got = (found.ms(50), found.ms(99), found.ms(99.9), found.max_ms(), found.figures()["p999_ms"])
    assert got == pytest.approx((50, 99, 100, 100, 100), rel=1e-3)


def test_no_latencies_are_zeros_and_a_negative_one_counts_as_a_microsecond() -> None:
    assert latency.Latencies().ms(99) == 0
    assert latency.of_seconds([-0.5]).ms(50) == pytest.approx(0.001)


def test_a_busy_block_is_charged_to_this_process_group() -> None:
    session = os.getsid(0)
    with cpu.used(session) as use:
        deadline = sum(os.times()[:2]) + 0.05
        while sum(os.times()[:2]) < deadline:
            pass
    assert use.of(session) >= 0.03
    assert use.wall_s >= use.of(session) * 0.5
    assert use.figures(1000)["cpu_us_per_req"] == pytest.approx(use.of(session) * 1000)


def test_a_childs_last_result_line_is_read() -> None:
    code = "print('X {\"n\": 1}'); print('noise'); print('X {\"n\": 2}')"
    done = child.run([sys.executable, "-c", code], "X ", what="child", timeout_s=30)
    assert done.result == {"n": 2}
    assert done.returncode == 0


def test_a_child_without_a_result_line_is_an_error_naming_its_exit() -> None:
    code = "import sys; print('oops', file=sys.stderr); sys.exit(3)"
    with pytest.raises(RuntimeError, match="exit 3: oops"):
        child.run([sys.executable, "-c", code], "X ", what="child", timeout_s=30)


def test_a_summary_must_be_a_json_object() -> None:
    code = "print('X [1, 2]')"
    with pytest.raises(RuntimeError, match="no object"):
        child.summary([sys.executable, "-c", code], "X ", what="child", timeout_s=30)
    found = child.summary([sys.executable, "-c", "print('X {}')"], "X ", what="c", timeout_s=30)
    assert found == {}
