"""The CPU pressure a whole-system row measures, and what its deadline check does with it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rig.invariants import Answers, answered_within_deadline
from rig.pressure import PRESSURED, CpuPressure, bound_kept, cpu_stall_us

PSI_TEXT = "some avg10=1.00 avg60=2.00 avg300=3.00 total={}\nfull avg10=0 total=0\n"


@dataclass(frozen=True)
class _Answer:
    status: int
    latency_s: float
    retry_after: str | None = None


def _psi(path: Path, total_us: int) -> None:
    path.write_text(PSI_TEXT.format(total_us))


def test_the_stall_total_is_read_from_the_some_line(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    _psi(psi, 123456)
    assert cpu_stall_us(psi) == 123456
    assert cpu_stall_us(tmp_path / "absent") is None


def test_the_share_is_the_stall_over_the_wall_time(tmp_path: Path) -> None:
    psi = tmp_path / "cpu"
    _psi(psi, 1_000_000)
    pressure = CpuPressure(psi)
    time.sleep(0.2)  # the window measured: its wall time is the denominator
    _psi(psi, 1_100_000)  # 0.1 s stalled
    share = pressure.share()
    assert share is not None
    assert 0.1 / 0.4 < share <= 0.1 / 0.2  # the window is at least the 0.2 s slept


def test_a_late_answer_fails_the_check_on_a_machine_with_cpu_to_spare() -> None:
    answers = Answers([_Answer(202, 0.1), _Answer(202, 9.0)], 4.5, cpu_pressure=0.2)
    check = answered_within_deadline(answers)
    assert not check.passed
    assert "CPU pressure 20%" in check.detail


def test_on_a_starved_machine_lateness_is_reported_not_asserted() -> None:
    answers = Answers([_Answer(202, 9.0), _Answer(0, 9.5)], 4.5, cpu_pressure=PRESSURED + 0.1)
    check = answered_within_deadline(answers)
    assert check.passed
    assert "2 of 2 late or unanswered (1 unanswered)" in check.detail
    assert "not asserted" in check.detail


def test_unmeasured_pressure_asserts_the_deadline() -> None:
    check = answered_within_deadline(Answers([_Answer(202, 9.0)], 4.5))
    assert not check.passed


@pytest.mark.parametrize("pressure", [None, 0.2, PRESSURED - 0.01])
def test_a_missed_bound_fails_unless_the_machine_was_pressured(pressure: float | None) -> None:
    with pytest.raises(AssertionError, match="65 failed"):
        bound_kept(False, "65 failed", pressure)


def test_a_missed_bound_on_a_pressured_machine_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bound_kept(False, "65 failed", PRESSURED)
    assert "reported, not asserted): 65 failed" in capsys.readouterr().out
    bound_kept(True, "kept", None)  # a kept bound passes anywhere
