"""The ``writer`` section: orders/s from Kafka into PostgreSQL at batch sizes 1, 100 and 1,000,
measured by ``python -m loadtest.bench.writer_load --json`` (a subprocess per repeat, so the
writer's event loop and the benchmark's never share a process). The batch of 1 is the baseline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from loadtest.bench import writer_load
from loadtest.bench.results import Recorder, rotate
from loadtest.measure import child

BATCH_SIZES = (1, 100, 1000)
TIMEOUT_S = 1800


def argv(batch_sizes: Sequence[int], orders: int, orders_at_1: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loadtest.bench.writer_load",
        "--batch-sizes",
        ",".join(str(b) for b in batch_sizes),
        "--orders",
        str(orders),
        "--orders-at-1",
        str(orders_at_1),
        "--json",
    ]


def command(orders: int, orders_at_1: int) -> str:
    shown = argv(BATCH_SIZES, orders, orders_at_1)
    return " ".join([".venv/bin/python", *shown[1:]])


def measure(batch_sizes: Sequence[int], orders: int, orders_at_1: int) -> dict[str, Any]:
    shown = argv(batch_sizes, orders, orders_at_1)
    return child.summary(shown, writer_load.RESULT_PREFIX, what="writer_load", timeout_s=TIMEOUT_S)


def run(rec: Recorder, repeats: int, orders: int, orders_at_1: int) -> dict[str, Any]:
    """Every repeat runs the batch sizes in a rotated order; returns the section's settings."""
    about: dict[str, Any] = {}
    for r in range(repeats):
        sizes = rotate(BATCH_SIZES, r)
        print(f"[writer] repeat {r + 1}/{repeats}: batch sizes {sizes} ...", end="", flush=True)
        started = time.monotonic()
        try:
            report = measure(sizes, orders, orders_at_1)
        except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
            print(f" FAILED: {exc}", flush=True)
            for size in sizes:
                rec.record("batch", str(size), r, {}, [f"run failed: {str(exc)[:300]}"])
            continue
        about = {k: v for k, v in report.items() if k != "results"}
        figures = []
        for result in report["results"]:
            metrics = {k: v for k, v in result.items() if k != "ratio_to_batch_1"}
            rec.record("batch", str(result["batch_size"]), r, metrics, [])
            figures.append(f"{result['batch_size']}: {result['orders_per_s']:,.0f}/s")
        print(f" {', '.join(figures)} ({time.monotonic() - started:.0f} s)", flush=True)
    return {
        "batch_sizes": list(BATCH_SIZES),
        "orders": orders,
        "orders_at_1": orders_at_1,
        "writer_bench": about,
        "tool_command": command(orders, orders_at_1),
    }
