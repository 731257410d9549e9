"""The ``vouchers`` section: flash vs ordinary voucher reservations/s under contention on one code
(ordinary = the baseline), measured by ``python -m loadtest.bench.voucher_load`` (the vouchers'
own benchmark, which starts its gateway and writer and checks its counts) as a subprocess per
repeat. Its last stdout line is JSON with at least ``flash_rps``, ``ordinary_rps`` and ``ratio``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from loadtest.bench import voucher_load
from loadtest.bench.results import Recorder
from loadtest.measure import child

MODULE = "loadtest.bench.voucher_load"
TIMEOUT_S = 1200
KINDS = ("flash", "ordinary")


def measure() -> dict[str, Any]:
    argv = [sys.executable, "-m", MODULE]
    report = child.summary(argv, voucher_load.RESULT_PREFIX, what=MODULE, timeout_s=TIMEOUT_S)
    for key in ("flash_rps", "ordinary_rps", "ratio"):
        if key not in report:
            raise RuntimeError(f"{MODULE} printed no {key!r}")
    return report


def run(rec: Recorder, repeats: int) -> dict[str, Any]:
    command = f".venv/bin/python -m {MODULE}"
    about: dict[str, Any] = {}
    for r in range(repeats):
        print(f"[vouchers] repeat {r + 1}/{repeats} ...", end="", flush=True)
        started = time.monotonic()
        try:
            report = measure()
        except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
            print(f" FAILED: {exc}", flush=True)
            for kind in KINDS:
                rec.record("one_code", kind, r, {}, [f"run failed: {str(exc)[:300]}"])
            continue
        about = {k: report[k] for k in ("uses", "attempts", "concurrency") if k in report}
        for kind in KINDS:
            detail = report.get(kind, {})
            metrics = {"rps": float(report[f"{kind}_rps"])}
            metrics.update({k: v for k, v in detail.items() if isinstance(v, int | float)})
            metrics["answers"] = detail.get("answers", {})
            rec.record("one_code", kind, r, metrics, [])
        took = time.monotonic() - started
        print(
            f" flash {report['flash_rps']:,.0f}/s, ordinary {report['ordinary_rps']:,.0f}/s,"
            f" ratio {report['ratio']} ({took:.0f} s)",
            flush=True,
        )
    return {"tool_command": command, **about}
