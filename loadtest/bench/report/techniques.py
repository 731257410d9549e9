"""bench.md section: the anti-oversell techniques side by side on one contended item."""

from __future__ import annotations

from typing import Any

from loadtest.bench.report.fmt import ms, pct, provenance, rate, ratio, spread, table
from loadtest.bench.stats import Run, figure, paired_ratio, select, summarize

Section = dict[str, Any]
DESCRIPTIONS = {
    "pg_conditional": "PostgreSQL `UPDATE … SET sold = sold + 1 WHERE id = $1 AND sold < quantity`",
    "pg_for_update": "PostgreSQL `SELECT … FOR UPDATE`, then `UPDATE`, in one transaction",
    "pg_optimistic": "PostgreSQL optimistic: read, `UPDATE … WHERE version = $v`, retry on 0 rows",
    "redis_decr": "Redis `DECR`, `INCR` back when negative",
    "redis_lua": "Redis `EVALSHA lua/reserve.lua` (dedup + stock + hold + outbox)",
    "redis_lock_pg": "Redis lock (`SET NX PX`, owner-checked Lua release) around a PostgreSQL"
    " read-then-write",
}


def _check(runs: list[Run]) -> str:
    if not runs:
        return "—"
    failed = [p for r in runs for p in r["problems"]]
    if failed:
        return "**" + "; ".join(sorted(set(failed))) + "**"
    sold = {r["metrics"]["sold_in_store"] for r in runs}
    return f"exact: sold {', '.join(str(v) for v in sorted(sold))} in every run"


def _per_clients(runs: list[Run], names: list[str], clients: int, baseline: str) -> list[str]:
    scenario = f"clients={clients}"
    base = select(runs, "techniques", scenario, baseline)
    rows = []
    for name in names:
        mine = select(runs, "techniques", scenario, name)
        retries = summarize(
            r["metrics"]["retries"] / r["metrics"]["attempts"] for r in mine if r["metrics"]
        )
        rows.append(
            [
                f"`{name}`",
                spread(figure(mine, "decisions_per_s")),
                "1" if name == baseline else ratio(paired_ratio(mine, base, "decisions_per_s")),
                spread(figure(mine, "p50_ms"), ms),
                spread(figure(mine, "p99_ms"), ms),
                "1" if name == baseline else ratio(paired_ratio(mine, base, "p99_ms")),
                spread(retries, lambda v: f"{v:.2f}"),
                spread(figure(mine, "client_cpu_busy"), pct),
                _check(mine),
            ]
        )
    return [
        f"### {clients} concurrent client{'s' if clients > 1 else ''}",
        "",
        *table(
            [
                "Technique",
                "decisions/s",
                f"÷ `{baseline}`",
                "p50 ms",
                "p99 ms",
                "p99 ÷ baseline",
                "retries/attempt",
                "client CPU",
                "oversell check",
            ],
            rows,
        ),
    ]


def _scaling(runs: list[Run], names: list[str], clients: list[int]) -> list[str]:
    rows = []
    for name in names:
        cells = [f"`{name}`"]
        first = select(runs, "techniques", f"clients={clients[0]}", name)
        for n in clients:
            mine = select(runs, "techniques", f"clients={n}", name)
            found = figure(mine, "decisions_per_s")
            p99 = figure(mine, "p99_ms")
            cell = "—" if found is None else f"{rate(found.median)}"
            if found is not None and n != clients[0]:
                cell += f" ({ratio(paired_ratio(mine, first, 'decisions_per_s'))})"
            if p99 is not None:
                cell += f", p99 {ms(p99.median)} ms"
            cells.append(cell)
        rows.append(cells)
    header = ["Technique"] + [
        f"{n} client{'s' if n > 1 else ''}" + (" (÷ first)" if i else "")
        for i, n in enumerate(clients)
    ]
    return [
        "### Where each one stops scaling (median decisions/s, ÷ the first column, median p99)",
        "",
        *table(header, rows),
    ]


def techniques(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    names = [
        n for n in DESCRIPTIONS if select(runs, "techniques", f"clients={s['clients'][-1]}", n)
    ]
    listing = [f"- `{name}`: {text}" for name, text in DESCRIPTIONS.items()]
    out = [
        "## Anti-oversell techniques on one contended item",
        "",
        *provenance(sec, s["tool_command"]),
        f"{s['units']} units, {s['attempts']:,} attempts, each a distinct buyer, from N concurrent"
        " clients (asyncio tasks of one Python process pinned to core"
        f" {s['core']}; asyncpg pool of N connections, redis-py asyncio cluster client). A"
        " *decision* is an attempt answered, won or lost; its latency includes lock waits and"
        " retries. After every trial the store is asked how many units it sold: it must be"
        f" exactly {s['units']} (the PostgreSQL table `bench.oversell_stock` has no CHECK, so an"
        " oversell would show rather than fail). The lock is held at most"
        f" {s['lock_ttl_ms']} ms; a client gives up after {s['lock_wait_s']:g} s of waiting"
        " (counted as a failure). *client CPU* near 100% means the Python client, not the"
        f" technique, was the limit. Baseline: `{s['baseline']}`.",
        "",
        *listing,
        "",
    ]
    for clients in s["clients"]:
        out += _per_clients(runs, names, clients, s["baseline"])
    return out + _scaling(runs, names, s["clients"])
