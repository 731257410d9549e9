"""bench.md sections past the HTTP front: the writer, the full spike (purchase to committed
order), the vouchers, and the load generators' own ceilings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadtest.bench.report.fmt import (
    Fmt,
    count,
    ms,
    provenance,
    rate,
    ratio,
    seconds,
    spread,
    table,
)
from loadtest.bench.stats import Run, figure, paired_ratio, select, summarize

Section = dict[str, Any]


def writer(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    base = select(runs, "writer", "batch", "1")
    rows = []
    for size in s["batch_sizes"]:
        mine = select(runs, "writer", "batch", str(size))
        rows.append(
            [
                f"{size:,}",
                spread(figure(mine, "orders"), count),
                spread(figure(mine, "orders_per_s")),
                "1" if size == 1 else ratio(paired_ratio(mine, base, "orders_per_s")),
                spread(figure(mine, "seconds"), seconds),
            ]
        )
    about = s.get("writer_bench", {})
    return [
        "## Writer: orders/s from Kafka into PostgreSQL",
        "",
        *provenance(sec, s["tool_command"]),
        "For each batch size a fresh topic (partitions: "
        f"{about.get('partitions', '?')}, batch time limit {about.get('batch_ms', '?')} ms) is",
        "filled with orders up front (not timed), then one writer process drains it; the rate is",
        "orders stored per second from the first batch to the last offset commit. Baseline: batch",
        f"size 1 (which drains {s['orders_at_1']:,} orders instead of {s['orders']:,}, to stay"
        " short). Unpinned: the writer shares both cores with PostgreSQL and Kafka.",
        "",
        *table(["Batch size", "orders", "orders/s", "÷ batch 1", "seconds"], rows),
    ]


def _counts(runs: Sequence[Run], metric: str) -> str:
    values = sorted({r["metrics"][metric] for r in runs if metric in r["metrics"]})
    if not values:
        return "—"
    word = " in every run" if len(values) == 1 and len(runs) > 1 else ""
    return " / ".join(count(v) for v in values) + word


def spike(sec: Section | None, closed: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    mine = select(runs, "spike", "spike", "gateway")
    closed_runs = select(closed["runs"], "closed", "sold_out", "gateway") if closed else []

    def vs_closed(metric: str) -> str:
        """Against the gateway's closed-loop sold-out median (most spike answers are 410s)."""
        base = figure(closed_runs, metric)
        if base is None:
            return "—"
        mine_vs = summarize(
            r["metrics"][metric] / base.median for r in mine if metric in r["metrics"]
        )
        return f"{ratio(mine_vs)} of {fmt_for(metric)(base.median)}"

    def fmt_for(metric: str) -> Fmt:
        return rate if metric == "rps" else ms

    lag_ratio = summarize(
        r["metrics"]["first_purchase_to_last_commit_s"] / r["metrics"]["sellout_s"]
        for r in mine
        if r["metrics"].get("sellout_s") and "first_purchase_to_last_commit_s" in r["metrics"]
    )
    statuses: dict[str, int] = {}
    for r in mine:
        for k, v in r["metrics"].get("statuses", {}).items():
            statuses[k] = statuses.get(k, 0) + v
    answers = ", ".join(f"{k}: {v:,}" for k, v in sorted(statuses.items())) or "—"
    closed_label = "the gateway's closed-loop sold-out figure (section (a), median)"
    rows = [
        [
            "spike req/s (buyers ÷ first request → last answer)",
            spread(figure(mine, "rps")),
            vs_closed("rps"),
        ],
        ["spike duration s", spread(figure(mine, "spike_s"), seconds), ""],
        ["p50 ms", spread(figure(mine, "p50_ms"), ms), vs_closed("p50_ms")],
        ["p99 ms", spread(figure(mine, "p99_ms"), ms), vs_closed("p99_ms")],
        ["p99.9 ms", spread(figure(mine, "p999_ms"), ms), vs_closed("p999_ms")],
        ["max ms", spread(figure(mine, "max_ms"), ms), ""],
        ["sell-out s (first 202 → last 202)", spread(figure(mine, "sellout_s"), seconds), ""],
        [
            "**first purchase → last order committed, s**",
            spread(figure(mine, "first_purchase_to_last_commit_s"), seconds),
            f"{ratio(lag_ratio)} of the sell-out time",
        ],
        [
            "last 202 → last order committed, s",
            spread(figure(mine, "last_202_to_last_commit_s"), seconds),
            "",
        ],
        [
            "the same span from the database (max(updated_at) − min(created_at)), s",
            spread(figure(mine, "db_first_created_to_last_stored_s"), seconds),
            "",
        ],
        [
            "gateway CPU µs per answer",
            spread(figure(mine, "cpu_us_per_req"), ms),
            vs_closed("cpu_us_per_req"),
        ],
    ]
    checks = [
        [
            "buyers (each exactly once) / units / shards",
            f"{s['buyers']:,} / {s['units']:,} / {s['shards']}",
        ],
        ["answers, all runs", answers],
        ["orders in PostgreSQL", _counts(mine, "orders_in_db")],
        ["distinct buyers among them", _counts(mine, "distinct_buyers_in_db")],
        ["sold (flash_sale_item.sold)", _counts(mine, "sold")],
        ["units left in Redis", _counts(mine, "redis_stock_left")],
    ]
    return [
        "## Full spike: first purchase to last order committed",
        "",
        *provenance(sec),
        f"A sale of {s['units']:,} units on {s['shards']} shards; one gateway worker (core"
        f" {s['server_core']}), a writer process on a Kafka topic of its own (cores"
        f" {s['writer_cores']}), wrk (`loadtest/generators/wrk/spike.lua`,"
        f" {s['connections']} connections, core {s['load_core']}) sending {s['buyers']:,}"
        " distinct buyers once each, as fast as"
        " they are answered. The sold-out flag keeps its shipped 1 s lifetime. PostgreSQL is"
        f" polled every {s['poll_s'] * 1000:.0f} ms for the item's order count; times are on"
        " one monotonic clock shared by wrk's script and the poller. wrk's latency histogram"
        " includes the few `GET /healthz` a thread sends on its idle connections after its last"
        " buyer (they are not counted as answers). Checked after every run: exactly as many 202s"
        " and order rows as units, no buyer twice, sold = quantity, every shard at 0."
        f" Baseline: {closed_label}, or the sale's own sell-out time.",
        "",
        *table(["", "min / **median** / max", "÷ baseline"], rows),
        *table(["Exact sell-out", ""], checks),
    ]


def vouchers(sec: Section | None) -> list[str]:
    if sec is None:
        return []
    s = sec["settings"]
    head = ["## Vouchers: flash vs ordinary on one code", ""]
    if "skipped" in s:
        return [*head, f"Not measured: {s['skipped']} (`{s['tool_command']}`).", ""]
    runs = sec["runs"]
    base = select(runs, "vouchers", "one_code", "ordinary")
    rows = []
    for kind in ("flash", "ordinary"):
        mine = select(runs, "vouchers", "one_code", kind)
        rows.append(
            [
                kind,
                spread(figure(mine, "rps")),
                "1" if kind == "ordinary" else ratio(paired_ratio(mine, base, "rps")),
                spread(figure(mine, "grants_per_s")),
                spread(figure(mine, "p50_ms"), ms),
                spread(figure(mine, "p99_ms"), ms),
            ]
        )
    shape = ", ".join(f"{k} {v:,}" for k, v in s.items() if k != "tool_command")
    return [
        *head,
        *provenance(sec, s["tool_command"]),
        "Reservations/s on one voucher code under contention, closed loop, measured and checked by"
        f" the vouchers' own benchmark ({shape}); unpinned. Baseline: the ordinary voucher.",
        "",
        *table(["Voucher", "reservations/s", "÷ ordinary", "grants/s", "p50 ms", "p99 ms"], rows),
    ]


def loadgen(sec: Section | None, closed: Section | None) -> list[str]:
    if sec is None:
        return []
    runs, s = sec["runs"], sec["settings"]
    wrk = figure(select(closed["runs"], "closed", "sold_out", "nginx"), "rps") if closed else None
    rows = []
    for tool, label in (
        ("locust", f"Locust, 1 process, {s['locust_users']} FastHttpUsers"),
        ("openloop", f"`loadtest/generators/openloop.py`, offered {rate(s['openloop_offered'])}/s"),
    ):
        mine = select(runs, "loadgen", "ceiling", tool)
        vs_wrk = summarize(r["metrics"]["rps"] / wrk.median for r in mine if wrk and r["metrics"])
        rows.append([label, spread(figure(mine, "rps")), ratio(vs_wrk)])
    return [
        "## Load generators: req/s from one process on one core",
        "",
        *provenance(sec, s["locust_command"]),
        f"Against nginx `return 410` on core {s['server_core']}, the generator on core"
        f" {s['load_core']}, {s['duration_s']:g} s each. The planner sizes Locust workers with"
        " the Locust figure. Baseline: wrk (1 thread) against the same nginx in the closed-loop"
        " section (median), where nginx, not wrk, may be the limit.",
        "",
        *table(["Generator", "req/s", "÷ wrk"], rows),
    ]
