"""The raw results, kept per section: ``loadtest/reports/bench-results.json`` holds the latest run
of every section (``python -m loadtest.bench --only writer`` replaces the writer section and keeps
the others), each with its own provenance: command, dates, machine, commit, settings, runs.

A run is one measurement: ``{"phase", "scenario", "subject", "repeat", "at", "loadavg_1m",
"metrics", "problems"}``; ``phase`` is the section's name. ``Recorder.step`` runs one measurement
with a progress line and records it, or records its failure and lets the others go on.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from loadtest.bench import machine
from loadtest.constants import REPORTS_DIR

RESULTS_PATH = REPORTS_DIR / "bench-results.json"
FORMAT = 2
Results = dict[str, Any]
Section = dict[str, Any]
Summarize = Callable[[dict[str, Any]], str]
T = TypeVar("T")


def rotate(items: Sequence[T], by: int) -> list[T]:
    """The run order of a repeat: rotated each time, so drift does not always hit one subject."""
    by %= len(items)
    return [*items[by:], *items[:by]]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class Recorder:
    """The runs of one section as they are measured."""

    phase: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    def record(
        self,
        scenario: str,
        subject: str,
        repeat: int,
        metrics: dict[str, Any],
        problems: list[str],
    ) -> dict[str, Any]:
        run = {
            "phase": self.phase,
            "scenario": scenario,
            "subject": subject,
            "repeat": repeat,
            "at": time.strftime("%H:%M:%S"),
            "loadavg_1m": machine.loadavg(),
            "metrics": metrics,
            "problems": problems,
        }
        self.runs.append(run)
        return run

    def step(
        self,
        label: str,
        where: tuple[str, str, int],
        run: Callable[[], tuple[dict[str, Any], list[str]]],
        summarize: Summarize,
    ) -> dict[str, Any]:
        """One measurement with a progress line. ``run`` returns (metrics, problems); a run that
        raises is recorded as failed and the section goes on (others edit the code meanwhile)."""
        print(f"  {label} ...", end="", flush=True)
        started = time.monotonic()
        scenario, subject, repeat = where
        try:
            metrics, problems = run()
        except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
            print(f" FAILED: {exc}", flush=True)
            return self.record(scenario, subject, repeat, {}, [f"run failed: {str(exc)[:300]}"])
        flag = "" if not problems else "  CHECK FAILED: " + "; ".join(problems)
        took = time.monotonic() - started
        print(f" {summarize(metrics)} ({took:.0f} s){flag}", flush=True)
        return self.record(scenario, subject, repeat, metrics, problems)


def begin() -> dict[str, Any]:
    """What a section records before it measures: start time, machine (load average), commit."""
    return {"started_at": now(), "machine": machine.describe(), "commit": machine.git_commit()}


def section(
    command: str, begun: dict[str, Any], settings: dict[str, Any], runs: list[dict[str, Any]]
) -> Section:
    """A finished section: ``begun`` (from ``begin()``), then the end time and load, versions,
    the settings and the runs."""
    about = dict(begun["machine"])
    about["loadavg_end"] = machine.loadavg()
    return {
        "command": command,
        "started_at": begun["started_at"],
        "finished_at": now(),
        "machine": about,
        "versions": machine.versions(),
        "commit": begun["commit"],
        "settings": settings,
        "runs": runs,
    }


def load(path: Path = RESULTS_PATH) -> Results:
    """The stored results, ``{"format": 2, "sections": {...}}``. A file written before sections
    existed keeps its closed-loop and Redis runs as two sections (its open-loop runs, at another
    offered rate than today's, are dropped)."""
    if not path.exists():
        return {"format": FORMAT, "sections": {}}
    raw: Results = json.loads(path.read_text())
    if raw.get("format") == FORMAT:
        return raw
    sections: dict[str, Section] = {}
    for name in ("closed", "redis"):
        runs = [r for r in raw.get("runs", []) if r["phase"] == name]
        if runs:
            sections[name] = {
                "command": raw["command"],
                "started_at": raw["started_at"],
                "finished_at": raw["finished_at"],
                "machine": raw["machine"],
                "versions": raw["versions"],
                "commit": "unknown (before commits were recorded)",
                "settings": raw["settings"],
                "runs": runs,
            }
    return {"format": FORMAT, "sections": sections}


def put(results: Results, name: str, data: Section) -> None:
    results["sections"][name] = data


def save(results: Results, path: Path = RESULTS_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(path)


def runs_of(results: Results, name: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = results["sections"].get(name, {}).get("runs", [])
    return got
