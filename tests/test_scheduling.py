"""The xdist scheduler (tests/support/scheduling.py), run for real on a small suite of its own:
the rows go to gw0 only, every other module may go to either worker, and a light worker runs at
the lower priority."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.workers import ROW_MODULES

ROOT = Path(__file__).resolve().parent.parent

# The project's own hooks (importing tests/ lowers a light worker's priority, as in the suite).
CONFTEST = """
from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler
"""

RECORD = """
import json, os, time

def _record(name):
    with open(os.environ["RAN"], "a") as ran:
        ran.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], os.nice(0)]) + "\\n")
    time.sleep(0.2)  # long enough that the other worker is handed work meanwhile
"""


def _module(prefix: str, tests: int) -> str:
    body = "".join(f"def test_{n}():\n    _record('{prefix}{n}')\n\n" for n in range(tests))
    return RECORD + "\n" + body


def test_rows_run_on_the_first_worker_only_and_the_other_runs_niced(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    rows = sorted(ROW_MODULES)[:2]  # two row modules, at the paths the suite has them
    for path in rows:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(_module("row", 2))
    for name in "abc":
        (tmp_path / f"test_light_{name}.py").write_text(_module(name, 3))
    ran = tmp_path / "ran.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p",
         "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RAN": str(ran)},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    records = [json.loads(line) for line in ran.read_text().splitlines()]
    assert len(records) == 13  # 2 rows modules of 2, 3 others of 3
    assert {worker for name, worker, _ in records if name.startswith("row")} == {"gw0"}
    workers = {worker for _, worker, _ in records}
    assert workers == {"gw0", "gw1"}  # the others took modules meanwhile
    niceness = {worker: nice for _, worker, nice in records}
    assert niceness["gw1"] > niceness["gw0"]
