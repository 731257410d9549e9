"""The reserve-speed runner's parsing: py-spy stacks into stages, vegeta's CSV into latencies,
tree specs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadtest.bench.reserve_speed import parse_tree, percentile, stages, vegeta_summary


def test_stages_bucket_each_stack_by_its_innermost_known_frame() -> None:
    collapsed = [
        "run (granian/_futures.py:15);_decide (gateway/purchase.py:98);"
        "user_id (gateway/auth.py:70);verify (gateway/hs256.py:90) 3",
        "run (granian/_futures.py:15);_decide (gateway/purchase.py:98) 1",
        "_run (granian/_futures.py:92);send (gateway/producer.py:127) 0",
        "main (somewhere.py:1) 4",
        "not a sample line",
    ]
    shares = stages(collapsed)
    assert shares == {
        "token verification": 3 / 8,
        "purchase handler (own code)": 1 / 8,
        "other": 4 / 8,
    }


def test_vegeta_latencies_from_send_and_from_intended_time() -> None:
    # 10 requests at 10/s from t=1000 s; request 5 was sent 200 ms late (the generator stalled)
    # and took 10 ms like the others: 10 ms as vegeta measures, 210 ms from its intended time.
    rows = []
    for seq in range(10):
        sent_ns = 1000 * 10**9 + seq * 10**8 + (200 * 10**6 if seq == 5 else 0)
        rows.append([str(sent_ns), "202", str(10 * 10**6), "0", "0", "", "", "", str(seq), "POST"])
    summary = vegeta_summary(rows, rate=10, skip=2)
    assert summary["requests"] == 8
    assert summary["statuses"] == {"202": 8}
    assert summary["max_ms_sent"] == pytest.approx(10)
    assert summary["max_ms_intended"] == pytest.approx(210)
    assert summary["p50_ms_intended"] == pytest.approx(10)
    assert summary["send_lag_p99_ms"] == pytest.approx(200)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 99.9) == 100
    assert percentile([], 99) == 0


def test_tree_specs(tmp_path: Path) -> None:
    tree = parse_tree(f"sticky={tmp_path},kafka_linger_ms=1")
    assert (tree.name, tree.root, tree.settings) == (
        "sticky",
        tmp_path,
        (("kafka_linger_ms", "1"),),
    )
    with pytest.raises(argparse.ArgumentTypeError):
        parse_tree(f"{tmp_path}")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_tree(f"x={tmp_path / 'missing'}")
