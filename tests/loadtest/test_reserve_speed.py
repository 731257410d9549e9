"""Comparing code trees: py-spy stacks into the stages of one 202, tree specs (a directory or a
revision), and the ``reserve_speed`` section's part of bench.md from a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtest.measure import trees
from loadtest.measure.profile import stages
from tests.loadtest.test_planner import render_bench, write_sections


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
    wanted = trees.parse(f"sticky={tmp_path},kafka_linger_ms=1")
    tree = trees.check_out(wanted, tmp_path / "out")
    assert (tree.name, tree.root, tree.settings) == (
        "sticky",
        tmp_path,
        (("kafka_linger_ms", "1"),),
    )
    with pytest.raises(ValueError, match="NAME=DIR"):
        trees.parse(f"{tmp_path}")
    with pytest.raises(ValueError, match="neither a directory nor a revision"):
        trees.check_out(trees.parse("x=no-such-revision"), tmp_path / "out")


@pytest.mark.timeout(60)
def test_a_revision_is_exported_without_touching_the_checkout(tmp_path: Path) -> None:
    tree = trees.check_out(trees.parse("base=HEAD"), tmp_path)
    assert tree.root == tmp_path / "base"
    assert (tree.root / "gateway" / "__main__.py").is_file()
    assert not (tree.root / ".git").exists()


def _run(scenario: str, subject: str, repeat: int, **metrics: Any) -> dict[str, Any]:
    return {"phase": "reserve_speed", "scenario": scenario, "subject": subject, "repeat": repeat,
            "at": "00:00:00", "loadavg_1m": 1.0, "metrics": metrics, "problems": []}  # fmt: skip


@pytest.mark.timeout(60)
def test_the_compare_part_pairs_each_round_against_the_first_tree(tmp_path: Path) -> None:
    closed = {"p99_ms": 20.0, "cpu_us_per_202": 150.0, "load_core_busy": 0.9, "non_2xx": 0}
    runs = [
        _run("closed", "base", 0, rps=1000.0, **closed),
        _run("closed", "current", 0, rps=1500.0, **closed),
        _run("closed", "base", 1, rps=2000.0, **closed),
        _run("closed", "current", 1, rps=2500.0, **closed),
        _run("open@500", "base/openloop", 0, rate=500.0, p50_ms=2.0, p99_ms=9.0, p999_ms=12.0,
             throughput_rps=499.0, cpu_us_per_answer=160.0),
        _run("ceiling", "openloop", 0, rate=4000.0, throughput_rps=3900.0, send_lag_p99_ms=0.4),
        _run("stages", "stamped", 0, **{"token verification": {
            "n": 100, "mean_ms": 0.05, "p50_ms": 0.04, "p90_ms": 0.08, "p99_ms": 0.2}}),
    ]  # fmt: skip
    section = {
        "command": ".venv/bin/python -m loadtest.bench --only reserve_speed --compare base=HEAD~1",
        "started_at": "2026-12-02 00:00:00", "finished_at": "2026-12-02 00:05:00",
        "commit": "abc1234", "clean": True, "changes": "0 modified, 0 untracked files",
        "machine": {"nproc": 2, "cpu_model": "x", "kernel": "6", "memory_gib": 8.0,
                    "loadavg_start": 1.0, "loadavg_end": 1.0},
        "versions": {"Python": "3.11"},
        "settings": {"repeats": 2, "naive": False, "vegeta": "", "connections": 256,
                     "trees": [{"name": "base", "root": "/srv/base", "settings": {}},
                               {"name": "current", "root": "/work", "settings": {}}]},
        "runs": runs,
    }  # fmt: skip
    results = write_sections({"sections": {"reserve_speed": section}}, tmp_path / "sections")
    text = render_bench(results, tmp_path / "bench.md")
    part = text[text.index("## The reserve path, code trees side by side") :]
    row = next(line for line in part.splitlines() if line.startswith("| current |"))
    # Paired per round: 1500/1000 and 2500/2000, median 1.375.
    assert "1.38×" in row
    assert "| base/openloop | 500 | 2.00 | 9.00 | 12.0 | 499 | 160 |" in part
    assert "| openloop | 4,000 | 3,900 | 0.40 |" in part
    assert "| token verification | 100 | 0.05 | 0.04 | 0.08 | 0.20 |" in part
