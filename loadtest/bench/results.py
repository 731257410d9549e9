"""The raw results, one committed file per section: ``loadtest/reports/sections/<name>.json``
holds the latest run of that section (``python -m loadtest.bench --only writer`` rewrites
``writer.json`` and no other), with its provenance: command, dates, machine and load average at
start and end, tool versions, commit and whether the tree was clean, settings, runs.

A run is one measurement, a ``Run`` row; ``phase`` is the section's name. ``Recorder.step``
runs one measurement with a progress line and records it, or records its failure and lets the
others go on.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from loadtest.bench import machine
from loadtest.constants import REPORTS_DIR

SECTIONS_DIR = REPORTS_DIR / "sections"
Results = dict[str, Any]
Section = dict[str, Any]
Summarize = Callable[[dict[str, Any]], str]
# One measured run of a repeat: its progress label, where it is recorded, and how it is measured.
Step = tuple[str, tuple[str, str, int], Callable[[], tuple[dict[str, Any], list[str]]]]
T = TypeVar("T")


class Run(TypedDict):
    """One measured run of a section, as committed: where it stands (scenario, subject, repeat),
    when (time of day, the 1-minute load), its figures and the checks it failed."""

    phase: str
    scenario: str
    subject: str
    repeat: int
    at: str
    loadavg_1m: float
    metrics: dict[str, Any]
    problems: list[str]


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
    runs: list[Run] = field(default_factory=list)

    def record(
        self,
        scenario: str,
        subject: str,
        repeat: int,
        metrics: dict[str, Any],
        problems: list[str],
    ) -> Run:
        run: Run = {
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
    ) -> Run:
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

    def repeats(
        self, title: str, repeats: int, steps: Callable[[int], Iterable[Step]], summarize: Summarize
    ) -> None:
        """Every repeat's steps (``steps(repeat)``), each one a ``step``, after a progress line."""
        for r in range(repeats):
            print(f"[{title}] repeat {r + 1}/{repeats}", flush=True)
            for label, where, run in steps(r):
                self.step(label, where, run, summarize)


def begin() -> dict[str, Any]:
    """What a section records before it measures: start time, machine (load average), commit."""
    return {"started_at": now(), "machine": machine.describe(), **machine.git_commit()}


def section(
    command: str, begun: dict[str, Any], settings: dict[str, Any], runs: list[Run]
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
        "clean": begun["clean"],
        "changes": begun["changes"],
        "settings": settings,
        "runs": runs,
    }


def load(directory: Path = SECTIONS_DIR) -> Results:
    """Every committed section, ``{"sections": {name: section}}``."""
    found = {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}
    return {"sections": found}


def save(name: str, data: Section, directory: Path = SECTIONS_DIR) -> Path:
    """Write one section's file (and no other)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    return path


def commit_label(data: Section) -> str:
    """``abc1234``, or ``abc1234 dirty (2 modified, 0 untracked files)``."""
    return data["commit"] if data.get("clean") else f"{data['commit']} dirty ({data['changes']})"


def runs_of(results: Results, name: str) -> list[Run]:
    got: list[Run] = results["sections"].get(name, {}).get("runs", [])
    return got
