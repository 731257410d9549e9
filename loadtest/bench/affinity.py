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


def _children(parents: set[int]) -> set[int]:
    found = set(parents)
    grew = True
    while grew:
        grew = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                pid, ppid = (
                    int(stat.parent.name),
                    int(stat.read_text().rsplit(")", 1)[1].split()[1]),
                )
            except (OSError, ValueError, IndexError):
                continue
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def stack_cpu_seconds(cfg: Settings) -> dict[str, float]:
    """User + system CPU so far of the stack's processes (children included), by command name
    (redis-server, java, postgres, ...): what one 202 costs beside the gateway."""
    tick = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for pid in _children(set(stack.pids(cfg))):
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return by_name


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
    pids = _children(set(stack.pids(cfg)))
    _pin(pids, cores)
    try:
        yield len(pids)
    finally:
        _pin(_children(set(stack.pids(cfg))), set(range(os.cpu_count() or 1)))
