"""kernel/fd_limit.py in a child process of its own (a raised limit stays with the process): the
soft limit goes up to what is needed or to the hard limit, never past it, never down."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

_, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
LOW = 256


def _limits_after(call: str) -> tuple[int, int, int]:
    """(returned, soft, hard) after ``call`` in a child whose soft limit starts at LOW."""
    code = (
        "import resource\n"
        "from kernel.fd_limit import raise_open_files_limit\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW}, {HARD}))\n"
        f"got = {call}\n"
        "print(got, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    returned, soft, hard = (int(n) for n in out.split())
    return returned, soft, hard


@pytest.fixture(autouse=True)
def _room() -> None:
    assert HARD == resource.RLIM_INFINITY or HARD > LOW + 1, f"hard limit {HARD} leaves no room"


def test_raised_to_the_hard_limit_by_default() -> None:
    assert _limits_after("raise_open_files_limit()") == (HARD, HARD, HARD)


def test_raised_to_what_is_needed() -> None:
    assert _limits_after(f"raise_open_files_limit({LOW + 1})") == (LOW + 1, LOW + 1, HARD)


def test_never_past_the_hard_limit_nor_down() -> None:
    if HARD != resource.RLIM_INFINITY:
        assert _limits_after(f"raise_open_files_limit({HARD + 1000})") == (HARD, HARD, HARD)
    assert _limits_after(f"raise_open_files_limit({LOW - 1})") == (LOW, LOW, HARD)
