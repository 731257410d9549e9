"""The reserve-speed runner's parsing: py-spy stacks into stages, tree specs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadtest.bench.reserve_speed import parse_tree, stages


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
