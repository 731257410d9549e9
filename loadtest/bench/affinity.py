"""Keep the stack (Redis, Kafka, PostgreSQL) off the server's core during a measured run.

The server under test is pinned to one core and the load generator to the other; left alone,
the scheduler also runs the stack's processes on the server's core, so a subject's rate would
depend on where Redis happened to run. Every subject gets the same treatment: the stack's
processes, their children and all their threads are moved to the load core for the run and
given every core back afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flashsale import stack
from kernel.settings import Settings
from loadtest.measure import cpu


def stack_pids(cfg: Settings) -> set[int]:
    """The stack's processes and all their children."""
    return cpu.descendants(stack.pids(cfg))


def _pin(pids: set[int], cores: set[int]) -> None:
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
            try:
                os.sched_setaffinity(int(task.name), cores)
            except (OSError, ValueError):
                continue  # the thread ended meanwhile


@contextmanager
def stack_on(cfg: Settings, cores: set[int]) -> Iterator[int]:
    """Run the block with the stack on ``cores``; yields how many processes were moved."""
    pids = stack_pids(cfg)
    _pin(pids, cores)
    try:
        yield len(pids)
    finally:
        _pin(stack_pids(cfg), set(range(os.cpu_count() or 1)))
