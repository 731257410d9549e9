"""bench.md section "Capacity model": the model (``loadtest.capacity.model``), the planner's
answer for the issue's target from the stored figures, and the model checked against
measured points."""

from __future__ import annotations

from typing import Any

from loadtest.bench.report.fmt import ms, pct, rate, ratio, seconds, table
from loadtest.bench.results import Results, runs_of
from loadtest.bench.stats import figure, select, summarize
from loadtest.capacity import model as capacity
from loadtest.capacity import plan

PLAN_COMMAND = (
    ".venv/bin/python -m loadtest.capacity.plan --rps 500000 --sold-out-share 0.98 --stock 10000"
    " --items 1 --p99-ms 100"
)


def _scaling_rows(res: Results) -> list[list[str]]:
    runs = runs_of(res, "scaling")
    sec = res["sections"].get("scaling")
    rows = []
    for scenario, title in (("sold_out", "sold-out"), ("reserve", "reserve")):
        one = {
            r["repeat"]: r for r in select(runs, "scaling", scenario, "workers=1") if r["metrics"]
        }
        two = [r for r in select(runs, "scaling", scenario, "workers=2") if r["metrics"]]
        pairs = [(one[r["repeat"]]["metrics"], r["metrics"]) for r in two if r["repeat"] in one]
        if not pairs or sec is None:
            continue
        cores = int(sec["machine"]["nproc"])
        predicted = [
            capacity.shared_cores_rps(m1["cpu_us_per_req"], m1["machine_cpu_us_per_req"], 2, cores)
            for m1, _ in pairs
        ]
        measured = [m2["rps"] for _, m2 in pairs]
        linear = [2 * m1["rps"] for m1, _ in pairs]
        rows.append(
            [
                f"{title}, 2 gateway processes (wrk on the same {cores} cores)",
                f"1 process: {_med([m1['cpu_us_per_req'] for m1, _ in pairs], ms)} server µs/req,"
                f" {_med([m1['machine_cpu_us_per_req'] for m1, _ in pairs], ms)} machine µs/req",
                f"{_med(predicted, rate)} req/s (naive 2× one process: {_med(linear, rate)})",
                f"{_med(measured, rate)} req/s",
                ratio(summarize(m / p for m, p in zip(measured, predicted, strict=True))),
            ]
        )
    return rows


def _med(values: list[float], fmt: Any) -> str:
    found = summarize(values)
    return "—" if found is None else str(fmt(found.median))


def _open_rows(res: Results) -> list[list[str]]:
    closed = runs_of(res, "closed")
    rows = []
    for run_key in sorted({r["scenario"] for r in runs_of(res, "open")}):
        scenario = run_key.split("@", 1)[0]
        cost = figure(select(closed, "closed", scenario, "gateway"), "cpu_us_per_req")
        mine = [r for r in select(runs_of(res, "open"), "open", run_key, "gateway") if r["metrics"]]
        if cost is None or not mine:
            continue
        offered = mine[0]["metrics"]["offered_rps"]
        predicted = offered * cost.median / 1e6
        measured = [r["metrics"]["server_busy"] for r in mine]
        rows.append(
            [
                f"gateway core busy, {run_key.replace('@', ' at ')} ({rate(offered)} req/s)"
                " if a request cost what it costs at saturation",
                f"{ms(cost.median)} CPU µs/req (closed loop, median) × offered req/s",
                pct(predicted),
                _med(measured, pct),
                ratio(summarize(m / predicted for m in measured)),
            ]
        )
    return rows


def _spike_rows(res: Results) -> list[list[str]]:
    spike = [
        r for r in runs_of(res, "spike") if r["metrics"].get("first_purchase_to_last_commit_s")
    ]
    reserve = figure(select(runs_of(res, "closed"), "closed", "reserve", "gateway"), "rps")
    writer = figure(select(runs_of(res, "writer"), "writer", "batch", "1000"), "orders_per_s")
    if not spike or reserve is None or writer is None:
        return []
    units = spike[0]["metrics"]["units"]
    batch_s = (
        res["sections"]["writer"]["settings"].get("writer_bench", {}).get("batch_ms", 0) / 1000
    )
    predicted = max(units / reserve.median, units / writer.median) + batch_s
    measured = [r["metrics"]["first_purchase_to_last_commit_s"] for r in spike]
    return [
        [
            f"first purchase → last order committed, {units:,} units",
            f"max({units:,} ÷ {rate(reserve.median)} reserve req/s, {units:,} ÷"
            f" {rate(writer.median)} writer orders/s) + one {batch_s * 1000:.0f} ms batch",
            f"{seconds(predicted)} s",
            f"{_med(measured, seconds)} s",
            ratio(summarize(m / predicted for m in measured)),
        ]
    ]


def _answer(res: Results) -> list[str]:
    try:
        fig = plan.figures(res)
    except plan.MissingFigure as exc:
        return [f"The planner cannot answer yet: {exc}.", ""]
    target = plan.DEFAULT_TARGET
    fleet = capacity.plan(target, fig)
    return [
        f"`{PLAN_COMMAND}` answers, from the figures above:",
        "",
        *(f"- {line.strip()}" for line in fleet.reasons),
        "",
        *table(["Fleet", ""], [list(row) for row in plan.table(fleet, target)]),
    ]


def capacity_model(res: Results) -> list[str]:
    doc = capacity.__doc__ or ""
    model = doc.split("\n\n", 1)[1] if "\n\n" in doc else doc
    checks = _scaling_rows(res) + _open_rows(res) + _spike_rows(res)
    out = [
        "## Capacity model",
        "",
        "The planner (`loadtest/capacity/plan.py`, model in `loadtest/capacity/model.py`) turns",
        "the figures of the latest run of each section into a fleet:",
        "",
        model.strip(),
        "",
        "### The planner's answer for 500,000 req/s, 98% sold-out, 10,000 units, p99 ≤ 100 ms",
        "",
        *_answer(res),
        "### The model against measured points",
        "",
        "Each row predicts a measured figure from other measured figures (never from itself).",
        "The machine has 2 cores shared with the stack and, for the 2-process rows, with the load",
        "generator, so the prediction charges every request the whole machine's CPU per request",
        "measured with one process (`capacity.shared_cores_rps`); a production fleet runs the",
        "load generators elsewhere and the model then reduces to processes × 10⁶ ÷ server µs/req.",
        "The *core busy* rows test the simplest model, a constant CPU cost per request: where a",
        "partly loaded gateway is busier than that predicts (it batches less per event-loop tick),",
        "the ratio is the correction, and the reason the planner takes the cost at its planned",
        "utilisation from the open-loop runs instead.",
        "",
    ]
    if not checks:
        return [*out, "No check points measured yet (sections scaling, open, spike).", ""]
    return out + table(
        ["Check", "from", "model predicts", "measured (median)", "÷ predicted"], checks
    )
