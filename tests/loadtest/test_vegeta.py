"""vegeta's results read back: latencies from its send and from each request's due time."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.generators import phased_vegeta
from loadtest.generators.phased import Phase, recovery_s
from loadtest.generators.vegeta import Hit, read_csv, summary
from tests.loadtest.test_planner import render_bench, write_sections


def _late_fifth() -> list[Hit]:
    # 10 requests at 10/s from t=1000 s; request 5 was sent 200 ms late (the generator stalled)
    # and took 10 ms like the others: 10 ms as vegeta measures, 210 ms from its intended time.
    late = {5: 200 * 10**6}
    return [
        Hit(seq, 1000 * 10**9 + seq * 10**8 + late.get(seq, 0), 10 * 10**6, 202)
        for seq in range(10)
    ]


def test_latencies_from_send_and_from_intended_time() -> None:
    figures = summary(_late_fifth(), rate=10, skip=2)
    assert figures["requests"] == 8
    assert figures["statuses"] == {"202": 8}
    assert figures["max_ms_sent"] == pytest.approx(10, rel=1e-3)
    assert figures["max_ms_intended"] == pytest.approx(210, rel=1e-3)
    assert figures["p50_ms_intended"] == pytest.approx(10, rel=1e-3)
    assert figures["send_lag_p99_ms"] == pytest.approx(200, rel=1e-3)


def test_csv_columns_are_read_by_position(tmp_path: Path) -> None:
    # timestamp, code, latency, bytes out, bytes in, error, body, attack, seq, method, url
    path = tmp_path / "results.csv"
    path.write_text(
        "1000000000,202,5000000,0,12,,e30=,,0,POST,http://x/\n"
        "1001000000,0,30000000000,0,0,timeout,,,1,POST,http://x/\n"
    )
    assert list(read_csv(path)) == [
        Hit(0, 10**9, 5 * 10**6, 202),
        Hit(1, 1001 * 10**6, 30 * 10**9, 0),
    ]


def _phase_hits(start_s: float, rate: int, seconds: float, code: int, took_ms: float) -> list[Hit]:
    return [
        Hit(seq, int((start_s + seq / rate) * 1e9), int(took_ms * 1e6), code)
        for seq in range(int(rate * seconds))
    ]


def test_phased_report_counts_goodput_while_the_overload_lasts() -> None:
    # Warm-up 1 s at 10/s, overload 2 s at 40/s (half 202 in 5 ms, half 503 in 1 ms; one
    # request unanswered), then 1 s at 10/s whose first 300 ms are still slow (a backlog).
    phases = [Phase(10, 1), Phase(40, 2), Phase(10, 1)]
    measured = [
        Hit(h.seq, h.sent_ns, h.latency_ns if h.seq % 2 else 10**6, 202 if h.seq % 2 else 503)
        for h in _phase_hits(101, 40, 2, 202, 5)
    ]
    measured[-2] = Hit(measured[-2].seq, measured[-2].sent_ns, 30 * 10**9, 0)
    after = _phase_hits(103, 10, 1, 202, 5)
    after[:3] = [Hit(h.seq, h.sent_ns, 400 * 10**6, 202) for h in after[:3]]
    result = phased_vegeta.report(phases, [_phase_hits(100, 10, 1, 202, 5), measured, after], 202)
    assert result["counts"] == {"ok": 40, "refused": 39, "other": 0}
    assert result["unanswered"] == 1
    assert result["goodput_rps"] == pytest.approx(40 / 2)  # warm-up answers ended before it
    assert result["refused_rps"] == pytest.approx(39 / 2)
    assert result["ok_p99_ms"] == pytest.approx(5, rel=1e-3)
    assert result["refused_p99_ms"] == pytest.approx(1, rel=1e-3)
    assert result["sent_rps"] == pytest.approx(40)
    # 400 ms answers in the first three windows: recovered after 0.3 s under a 20 ms bound.
    assert recovery_s(result["after_windows"], bound_ms=20) == pytest.approx(0.3)


def _row(multiple: float, offered: float, sent: float | None) -> dict[str, object]:
    return {
        "multiple": multiple, "offered_rps": offered, "goodput_rps": 900.0, "ok_p99_ms": 20.0,
        "refused_rps": 0.0, "refused_p99_ms": 0.0, "counts": {"other": 0}, "unanswered": 0,
        "peak_rss_mb": 100.0, "recovery_s": 0.0, "dispatch_lag_p99_ms": 0.5, "run": "gateway, on",
        **({"sent_rps": sent} if sent is not None else {}),
    }  # fmt: skip


@pytest.mark.timeout(60)
def test_overload_table_marks_the_rows_vegeta_could_not_offer(tmp_path: Path) -> None:
    rows = [_row(0.5, 500, 500), _row(2, 2000, 1200), _row(5, 5000, None)]
    section = {
        "command": ".venv/bin/python -m loadtest.bench --only overload",
        "started_at": "2026-12-02 00:00:00", "finished_at": "2026-12-02 00:05:00",
        "commit": "abc1234", "clean": True, "changes": "0 modified, 0 untracked files",
        "machine": {"nproc": 2, "cpu_model": "x", "kernel": "6", "memory_gib": 8.0,
                    "loadavg_start": 1.0, "loadavg_end": 1.0},
        "versions": {"Python": "3.11"},
        "settings": {"repeats": 1, "maxima": {"reserve": 1000.0}},
        "runs": [
            {"phase": "overload", "scenario": "reserve", "subject": str(r["run"]), "repeat": i,
             "at": "00:00:00", "loadavg_1m": 1.0, "metrics": r, "problems": []}
            for i, r in enumerate(rows)
        ],
    }  # fmt: skip
    results = write_sections({"sections": {"overload": section}}, tmp_path / "sections")
    text = render_bench(results, tmp_path / "bench.md")
    part = text[text.index("### reserve path (maximum 1,000 req/s, closed loop)") :]
    half, double, five = part.splitlines()[4:7]
    assert double.startswith("| 2× (2,000/s) † sent 1,200/s |")
    assert "†" not in half and "†" not in five
