"""Render ``bench.md`` from the stored results (the latest run of every section); every number
comes from them, and every section says which command, commit, machine and date produced it.

``python -m loadtest.bench --render`` re-renders from the committed section files without
measuring again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.settings import PROJECT_ROOT
from loadtest.bench import results as store
from loadtest.bench.report import capacity as report_capacity
from loadtest.bench.report.fmt import machine, not_run, ratio, run_command, table
from loadtest.bench.stats import Run, Summary, paired_ratio, select

BENCH_MD = PROJECT_ROOT / "bench.md"
SECTIONS_PATH = f"{store.SECTIONS_DIR.relative_to(PROJECT_ROOT)}/"


@dataclass(frozen=True)
class Part:
    """A section's part of the report: its name, title, and how it renders from the results."""

    name: str
    title: str
    render: Callable[[dict[str, Any]], list[str]]


# (section, scenario, subject, baseline, metric, goal, label)
TARGETS = (
    ("closed", "sold_out", "gateway", "bare_asgi", "rps", 0.9,
     "Sold-out req/s, gateway ÷ bare ASGI"),
    ("closed", "reserve", "gateway", "naive", "rps", 2.5,
     "Reserve req/s, gateway ÷ naive gateway"),
    ("writer", "batch", "100", "1", "orders_per_s", 20.0, "Writer orders/s, batch 100 ÷ batch 1"),
    ("writer", "batch", "1000", "1", "orders_per_s", 20.0,
     "Writer orders/s, batch 1,000 ÷ batch 1"),
)  # fmt: skip


def _verdict(measured: Summary | None, goal: float) -> str:
    if measured is None:
        return "no committed result"
    if measured.low >= goal:
        return "met in every repeat"
    if measured.median >= goal:
        return "met (median), not in every repeat"
    return "**not met**"


def _targets(res: store.Results) -> list[str]:
    rows = []
    for section, scenario, subject, baseline, metric, goal, label in TARGETS:
        runs = store.runs_of(res, section)
        measured = paired_ratio(
            select(runs, section, scenario, subject),
            select(runs, section, scenario, baseline),
            metric,
        )
        rows.append([label, f"≥ {goal:g}×", ratio(measured), _verdict(measured, goal)])
    spike = [r for r in store.runs_of(res, "spike") if r["metrics"]]
    if spike:
        exact = all(not r["problems"] for r in spike)
        rows.append(
            [
                "Full spike sells exactly the stock (202s = orders = sold, no buyer twice)",
                "every run",
                f"{sum(exact for _ in spike)} of {len(spike)} runs" if exact else "see Checks",
                "met in every repeat" if exact else "**not met**",
            ]
        )
    return ["## Targets", "", *table(["Target", "Goal", "Measured", "Verdict"], rows)]


def _provenance(res: store.Results, parts: Sequence[Part]) -> list[str]:
    rows = []
    for name, title in ((p.name, p.title) for p in parts):
        sec = res["sections"].get(name)
        if sec is None:
            rows.append([title, "no committed result", f"`{run_command(name)}`", "", ""])
            continue
        m = sec["machine"]
        rows.append(
            [
                title,
                f"{sec['started_at']} → {sec['finished_at'][11:]}",
                f"`{sec['command']}`",
                store.commit_label(sec),
                f"{machine(m)}; load {m['loadavg_start']:.2f} → {m.get('loadavg_end', 0):.2f}",
            ]
        )
    return [
        "## Where the figures come from",
        "",
        "Each section is the latest run of that section (`--only` reruns a subset and keeps the",
        "rest). Dates are UTC; *load* is the 1-minute load average at the section's start and end",
        "(the machine is shared: compare ratios, not absolute numbers).",
        "",
        *table(["Section", "Date", "Command", "Commit", "Machine"], rows),
    ]


def _versions(res: store.Results) -> list[str]:
    latest = max(res["sections"].values(), key=lambda s: s["finished_at"], default=None)
    if latest is None:
        return []
    m = latest["machine"]
    return [
        f"Machine: {machine(m)}, Linux {m['kernel']}, {m['memory_gib']:.1f} GiB RAM. Versions:",
        ", ".join(f"{k} {v}" for k, v in latest["versions"].items()) + ".",
        "",
    ]


def _checks(res: store.Results) -> list[str]:
    runs: list[Run] = [r for sec in res["sections"].values() for r in sec["runs"]]
    failed = [r for r in runs if r["problems"]]
    out = ["## Checks", ""]
    if not failed:
        out.append(f"All {len(runs)} runs passed their checks (see *How it was measured*).")
    for r in failed:
        out.append(
            f"- {r['phase']}, repeat {r['repeat'] + 1}, {r['scenario']} {r['subject']}: "
            + "; ".join(r["problems"])
        )
    return out + [""]


def _method(res: store.Results) -> list[str]:
    closed = res["sections"].get("closed")
    out = ["## How it was measured", ""]
    if closed is not None:
        s = closed["settings"]
        env = " ".join(f"{k}={v}" for k, v in s["gateway_env"].items())
        out += [
            f"- HTTP runs: one server at a time, started for its run and stopped after it, pinned"
            f" to core {s['server_core']}; the load generator pinned to core {s['load_core']}."
            f" For a single-worker run the stack (Redis, Kafka, PostgreSQL, children and threads)"
            f" is moved to core {s['load_core']} as well, so the server's core is its own."
            " Within a repeat the subjects of a scenario run back to back, in an order rotated"
            f" every repeat. Every closed-loop run follows a {s['warmup_s']:g} s wrk warm-up.",
            f"- Gateway environment: `{env}` (all load comes from 127.0.0.1, so the per-IP bucket"
            " is lifted; the sold-out flag outlives the run, so a tokenless request never falls"
            " through to token checks when the 1 s default flag expires).",
        ]
    out += [
        "- *Server CPU* is the user + system time of the server's processes (all threads) over"
        " the measured run, from /proc: per answered request, and as a share of one core's wall"
        " time (near 100%: the server was the bottleneck).",
        "- Checks: sold-out runs answered 410 throughout, from the flag; reserve runs answered"
        " 202 throughout, every 202 a buyer in Redis; no socket errors or timeouts;"
        " redis-benchmark calls each added a buyer; writer runs stored every order; the spike"
        " and the techniques sold exactly the stock.",
        "- A ratio is taken per repeat, between runs made side by side in that repeat, then"
        " summarised as **median** (min–max). Every figure is **min / median / max** over the"
        " repeats (a single run is marked *(1 run)*: a `--quick` smoke run, not a measurement).",
        f"- Raw results: `{SECTIONS_PATH}<section>.json` (committed); server logs:"
        " `loadtest/reports/logs/`.",
    ]
    return out


def _sections(got: dict[str, Any], parts: Sequence[Part]) -> list[str]:
    out: list[str] = []
    for part in parts:
        out += part.render(got) if part.name in got else not_run(part.name, part.title)
    return out


def took_s(section: dict[str, Any]) -> float:
    """How long a section took to measure, from its committed start and end."""
    fmt_ = "%Y-%m-%d %H:%M:%S"
    start = dt.datetime.strptime(section["started_at"], fmt_)
    return (dt.datetime.strptime(section["finished_at"], fmt_) - start).total_seconds()


def _header(sections: dict[str, Any], parts: Sequence[Part]) -> list[str]:
    """What produced this page and how long that takes: one statement, from the committed data."""
    took = [took_s(sections[p.name]) for p in parts if p.name in sections]
    done = f"{len(took)} of the {len(parts)} sections have a committed result"
    if took:
        done += (
            f"; measuring them took {sum(took) / 60:.0f} min in all (each section's dates below)"
        )
    return [
        f"Generated from the committed results, `{SECTIONS_PATH}<section>.json`, by"
        " `.venv/bin/python -m loadtest.bench` (`make bench` runs `scripts/bootstrap --bench`, then"
        " every section). Do not edit by hand: `.venv/bin/python -m loadtest.bench --only"
        " SECTION[,SECTION]` measures those sections again and rewrites their files and this page;"
        f" `.venv/bin/python -m loadtest.bench --render` rewrites this page alone. {done}.",
        "",
    ]


def render(res: store.Results, parts: Sequence[Part]) -> str:
    sections: dict[str, Any] = res["sections"]
    body: Sequence[str] = [
        "# Purchase path benchmark",
        "",
        *_header(sections, parts),
        *_versions(res),
        *_targets(res),
        *_provenance(res, parts),
        *_sections(sections, parts),
        *report_capacity.capacity_model(res),
        *_checks(res),
        *_method(res),
    ]
    return "\n".join(body).rstrip() + "\n"


def write(res: store.Results, parts: Sequence[Part], bench_md: Path = BENCH_MD) -> None:
    bench_md.write_text(render(res, parts))
