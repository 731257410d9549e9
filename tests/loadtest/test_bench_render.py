"""``python -m loadtest.bench --render``: bench.md rendered whole from the committed section files
(``loadtest/reports/sections/<section>.json``) with no measurement and no stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel.settings import PROJECT_ROOT
from tests.loadtest.test_planner import render_bench

SECTIONS_DIR = PROJECT_ROOT / "loadtest" / "reports" / "sections"
# Every section of the harness, in the report's order.
SECTIONS = (
    "closed",
    "open",
    "redis",
    "scaling",
    "writer",
    "spike",
    "techniques",
    "vouchers",
    "loadgen",
    "balancer",
    "reserve_speed",
    "overload",
    "failover",
    "room",
    "starvation",
    "wait_cost",
)


@pytest.mark.timeout(60)
def test_the_committed_files_render_every_section(tmp_path: Path) -> None:
    text = render_bench(SECTIONS_DIR, tmp_path / "bench.md")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    for name in SECTIONS:
        committed = SECTIONS_DIR / f"{name}.json"
        if committed.exists():
            started = json.loads(committed.read_text())["started_at"]
            assert any(started in row for row in rows), f"{name}: no provenance row"
        else:
            # A section with no committed result says the one command that measures it.
            assert f"run `.venv/bin/python -m loadtest.bench --only {name}`" in text


@pytest.mark.timeout(60)
def test_rendering_reads_only_the_given_files_and_writes_no_section(tmp_path: Path) -> None:
    results = tmp_path / "sections"
    results.mkdir()
    before = {p.name: p.read_bytes() for p in SECTIONS_DIR.glob("*.json")}
    text = render_bench(results, tmp_path / "bench.md")
    assert {p.name: p.read_bytes() for p in SECTIONS_DIR.glob("*.json")} == before
    assert not list(results.iterdir())
    for name in SECTIONS:
        assert f"--only {name}`" in text
