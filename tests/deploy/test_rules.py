"""The Prometheus rules (deploy/prometheus/rules/) under ``promtool``: they load, every unit test
in deploy/prometheus/tests/ passes, every alert has a case that fires and one that does not,
every recording rule is evaluated by a test, and every alert has its runbook section."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.settings import PROJECT_ROOT

PROMETHEUS = PROJECT_ROOT / "deploy" / "prometheus"
RULES = sorted((PROMETHEUS / "rules").glob("*.yml"))
TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
RUNBOOK = PROJECT_ROOT / "docs" / "alerts.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: scripts/bootstrap installs Debian's prometheus")
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _rules(kind: str) -> list[dict[str, Any]]:
    """Every rule of ``kind`` ("alert" or "record") in the rule files."""
    found = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [rule for rule in group["rules"] if kind in rule]
    return found


def _tests() -> list[dict[str, Any]]:
    return [case for path in TESTS for case in yaml.safe_load(path.read_text())["tests"]]


def test_the_rule_files_load() -> None:
    done = _promtool("check", "rules", *map(str, RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_promtool_unit_test_passes() -> None:
    assert TESTS
    done = _promtool("test", "rules", *map(str, TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    cases: dict[str, set[bool]] = defaultdict(set)
    for case in _tests():
        for check in case.get("alert_rule_test", []):
            cases[check["alertname"]].add(bool(check["exp_alerts"]))
    missing = {
        rule["alert"]: sorted({True, False} - cases[rule["alert"]]) for rule in _rules("alert")
    }
    assert {name: lack for name, lack in missing.items() if lack} == {}


def test_every_recording_rule_is_evaluated_by_a_test() -> None:
    evaluated = {
        check["expr"].strip() for case in _tests() for check in case.get("promql_expr_test", [])
    }
    assert {rule["record"] for rule in _rules("record")} - evaluated == set()


def test_every_alert_has_a_runbook_section() -> None:
    headings = {line[3:].strip() for line in RUNBOOK.read_text().splitlines() if line[:3] == "## "}
    for rule in _rules("alert"):
        assert rule["alert"] in headings, f"docs/alerts.md has no section for {rule['alert']}"
        assert rule["annotations"]["runbook"] == f"docs/alerts.md#{rule['alert'].lower()}"


def test_the_local_stack_config_is_valid(tmp_path: Path) -> None:
    from flashsale.stack.prometheus import render_config
    from kernel.settings import Settings

    config = tmp_path / "prometheus.yml"
    config.write_text(render_config(Settings(state_dir=tmp_path), tmp_path))
    done = _promtool("check", "config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_health_jobs_are_scraped_at_their_own_interval(tmp_path: Path) -> None:
    from flashsale.stack.prometheus import render_config
    from kernel.settings import Settings

    cfg = Settings(state_dir=tmp_path, scrape_interval_s=1, health_scrape_interval_s=7)
    config = yaml.safe_load(render_config(cfg, tmp_path))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["redis"]["scrape_interval"] == jobs["prometheus"]["scrape_interval"] == "7s"
    # The spike's jobs keep the global interval.
    assert config["global"]["scrape_interval"] == "1s"
    assert all("scrape_interval" not in jobs[j] for j in ("gateway", "writer", "jobs"))
