"""``python -m loadtest.bench --render``: bench.md rendered whole from the committed section files
(``loadtest/reports/sections/<section>.json``) with no measurement and no stack."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kernel.settings import PROJECT_ROOT
from tests.loadtest.test_planner import render_bench, write_sections

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
    assert "not measured" not in text
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


def _section(
    name: str, settings: dict[str, Any], runs: list[tuple[str, str, dict[str, Any]]]
) -> dict[str, Any]:
    return {
        "command": f".venv/bin/python -m loadtest.bench --only {name}",
        "started_at": "2026-12-02 00:00:00", "finished_at": "2026-12-02 00:05:00",
        "commit": "abc1234", "clean": False, "changes": "1 modified, 0 untracked files",
        "machine": {"nproc": 2, "cpu_model": "x", "kernel": "6", "memory_gib": 8.0,
                    "loadavg_start": 1.0, "loadavg_end": 1.5},
        "versions": {"Python": "3.11"},
        "settings": {"repeats": 1, **settings},
        "runs": [
            {"phase": name, "scenario": scenario, "subject": subject, "repeat": i,
             "at": "00:00:00", "loadavg_1m": 1.0, "metrics": metrics, "problems": []}
            for i, (scenario, subject, metrics) in enumerate(runs)
        ],
    }  # fmt: skip


@pytest.mark.timeout(60)
def test_the_folded_runners_parts_render_their_figures(tmp_path: Path) -> None:
    wrk = {"p99_ms": 3.0, "cpu_us_per_req": 40.0}
    opened = {"achieved_rps": 1000.0, "p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0,
              "max_ms": 4.0, "statuses": {"202": 10}, "peak_rss_mb": 90.0}  # fmt: skip
    sections = {
        "failover": _section("failover", {}, [("failover", "1000", {
            "node_timeout_ms": 1000, "validity_factor": 10, "watched": False,
            "promoted_s": [1.9, 2.1, 2.8], "router_s": [2.0], "other_failures": 0,
            "failovers_1s": [False], "failovers_2s": [True]})]),
        "room": _section("room", {}, [
            ("room", "sold out", {"rps": 8000.0, **wrk}),
            ("room", "poll", {"rps": 4000.0, **wrk, "cpu_us_per_req": 80.0})]),
        "starvation": _section("starvation", {"rate": 1000.0}, [
            ("starvation", "without the attack", opened),
            ("starvation", "with the attack", {**opened, "p99_ms": 5.0})]),
        "wait_cost": _section(
            "wait_cost", {"shards": 6, "seconds": 3.0, "wait_timeout_ms": 100}, [
                ("callers=16", "on", {"per_s": 16000.0, "p50_ms": 0.9, "p99_ms": 3.2}),
                ("callers=16", "off", {"per_s": 25000.0, "p50_ms": 0.55, "p99_ms": 2.3})]),
    }  # fmt: skip
    results = write_sections({"sections": sections}, tmp_path / "sections")
    text = render_bench(results, tmp_path / "bench.md")
    assert "| 1000 ms | 10 | 1.90 / 2.10 / 2.80 | 2.00 / 2.00 / 2.00 | 0 | 0/1 | 1/1 |" in text
    assert "| poll | 4,000 | 0.50 | 80 | 2.00 | 3.0 |" in text
    assert "Purchase p99 with the attack ÷ without: 2.50×." in text
    assert "| 16 | 16,000 | 25,000 | 0.64 | 0.90 / 0.55 | 3.20 / 2.30 |" in text
    assert "commit abc1234 dirty (1 modified, 0 untracked files)" in text


# A repository path in backticks, as the docs and bench.md's text name files.
NAMED_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|lua|md|conf|json|tmpl|yml|cfg))`")


def _gone(text: str, *bases: Path) -> list[str]:
    return sorted(p for p in NAMED_PATH.findall(text) if not any((b / p).exists() for b in bases))


def test_the_docs_and_the_report_text_name_only_paths_that_exist() -> None:
    assert _gone((PROJECT_ROOT / "README.md").read_text(), PROJECT_ROOT) == []
    loadtest = PROJECT_ROOT / "loadtest"
    assert _gone((loadtest / "README.md").read_text(), loadtest, PROJECT_ROOT) == []
    # bench.md's prose is the renderer's: every path its sections' text names.
    sources = "".join(p.read_text() for p in sorted((loadtest / "bench").rglob("*.py")))
    assert _gone(sources, PROJECT_ROOT) == []


RUN_FIELDS = {"phase", "scenario", "subject", "repeat", "at", "loadavg_1m", "metrics", "problems"}
SECTION_FIELDS = {"command", "started_at", "finished_at", "machine", "versions", "commit", "clean",
                  "changes", "settings", "runs"}  # fmt: skip


def test_every_committed_section_says_where_its_figures_come_from() -> None:
    committed = sorted(SECTIONS_DIR.glob("*.json"))
    assert committed, "no committed section"
    for path in committed:
        section = json.loads(path.read_text())
        assert path.stem in SECTIONS
        assert set(section) == SECTION_FIELDS, path.name
        assert {"loadavg_start", "loadavg_end", "nproc", "cpu_model"} <= set(section["machine"])
        assert isinstance(section["clean"], bool) and section["versions"]
        assert all(set(run) == RUN_FIELDS and run["phase"] == path.stem for run in section["runs"])
