"""How numbers look in bench.md: one formatter per kind of figure, a min / **median** / max
spread, a paired ratio, a Markdown table, and the provenance line every section starts with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loadtest.bench.results import commit_label
from loadtest.bench.stats import Summary

Fmt = Callable[[float], str]


def rate(value: float) -> str:
    return f"{value:,.0f}"


def ms(value: float) -> str:
    if value < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def seconds(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def count(value: float) -> str:
    return f"{value:,.0f}"


def spread(summary: Summary | None, fmt: Fmt = rate) -> str:
    if summary is None:
        return "—"
    if summary.count == 1:
        return f"**{fmt(summary.median)}** (1 run)"
    return f"{fmt(summary.low)} / **{fmt(summary.median)}** / {fmt(summary.high)}"


def ratio(summary: Summary | None) -> str:
    if summary is None:
        return "—"
    if summary.count == 1:
        return f"{summary.median:.2f}×"
    return f"**{summary.median:.2f}×** ({summary.low:.2f}–{summary.high:.2f})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def machine(m: dict[str, Any]) -> str:
    return f"{m['nproc']} cores, {m['cpu_model']}"


def provenance(section: dict[str, Any], tool: str | None = None) -> list[str]:
    """Where a section's figures come from: date, command, commit, machine."""
    repeats = section["settings"].get("repeats")
    line = (
        f"*Measured {section['started_at']} → {section['finished_at'][11:]} UTC by"
        f" `{section['command']}`"
    )
    if tool:
        line += f" (which runs `{tool}`)"
    line += f", commit {commit_label(section)}, on {machine(section['machine'])}"
    if repeats:
        line += f", {repeats} repeat(s)"
    return [line + ".*", ""]


def run_command(section: str) -> str:
    """The one command that measures ``section`` again."""
    return f".venv/bin/python -m loadtest.bench --only {section}"


def not_run(section: str, title: str) -> list[str]:
    """A section with no committed result: its heading and the command that measures it."""
    return [f"## {title}", "", f"No committed result yet: run `{run_command(section)}`.", ""]
