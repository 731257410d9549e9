"""The stamped copy for the breakdown of one 202: it applies to the code as it is, and its
summary reads what the copy records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernel.settings import PROJECT_ROOT
from loadtest.measure.stamps import stamp, summary


def test_summary_gives_count_mean_and_percentiles_in_ms() -> None:
    figures = summary({"redis": [0.001 * v for v in range(1, 101)], "empty": []})
    assert figures == {
        "redis": {
            "n": 100,
            "mean_ms": pytest.approx(50.5),
            "p50_ms": pytest.approx(50, rel=1e-3),
            "p90_ms": pytest.approx(90, rel=1e-3),
            "p99_ms": pytest.approx(99, rel=1e-3),
        }
    }


@pytest.mark.timeout(60)
def test_the_stamps_apply_to_the_current_code_and_it_still_imports(tmp_path: Path) -> None:
    copy = stamp(PROJECT_ROOT, tmp_path / "stamped", stamps_dir=tmp_path)
    modules = "gateway.purchase, gateway.front, gateway.producer, shard_router.autopipeline"
    done = subprocess.run(
        [sys.executable, "-c", f"import {modules}; from kernel import stagetimes"],
        cwd=copy,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "stagetimes" in (copy / "gateway" / "purchase.py").read_text()
