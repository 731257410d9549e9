"""CPU time by process group, from /proc: a server started in a session of its own (its id the
session's), its workers and threads with it. ``used`` measures groups over a ``with`` block."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Task:
    """One line of /proc/<pid>/stat (or of a thread's /proc/<pid>/task/<tid>/stat)."""

    id: int
    name: str
    ppid: int
    session: int
    cpu_s: float  # user + system so far


def _read(stat: Path) -> Task | None:
    try:
        text = stat.read_text()
    except OSError:
        return None  # it exited while we looked
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    if len(fields) < 13:
        return None
    name = head[head.index("(") + 1 :]
    cpu = (int(fields[11]) + int(fields[12])) / TICK  # fields 14, 15: utime, stime
    return Task(int(stat.parent.name), name, int(fields[1]), int(fields[3]), cpu)


def processes() -> Iterator[Task]:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        if (task := _read(stat)) is not None:
            yield task


def threads() -> Iterator[Task]:
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        if (task := _read(stat)) is not None:
            yield task


def group_s(session: int) -> float:
    """CPU seconds so far of every process in ``session``, all threads included."""
    return sum(t.cpu_s for t in processes() if t.session == session)


def members(session: int) -> list[int]:
    return [t.id for t in processes() if t.session == session]


def thread_s(session: int) -> dict[str, float]:
    """CPU seconds so far of the threads of ``session`` by thread name, digits dropped (so
    librdkafka's ``rdk:broker1`` and ``rdk:broker2`` add up)."""
    found: dict[str, float] = {}
    for t in threads():
        if t.session == session:
            name = t.name.rstrip("0123456789")
            found[name] = found.get(name, 0.0) + t.cpu_s
    return found


def descendants(parents: Iterable[int]) -> set[int]:
    found = set(parents)
    tasks = list(processes())
    grew = True
    while grew:
        grew = False
        for t in tasks:
            if t.ppid in found and t.id not in found:
                found.add(t.id)
                grew = True
    return found


def by_name_s(pids: Iterable[int]) -> dict[str, float]:
    """CPU seconds so far of ``pids`` by command name (redis-server, java, postgres, ...)."""
    wanted = set(pids)
    found: dict[str, float] = {}
    for t in processes():
        if t.id in wanted:
            found[t.name] = found.get(t.name, 0.0) + t.cpu_s
    return found


def core_ticks(cpu: str = "cpu") -> tuple[int, int]:
    """(busy, total) jiffies so far of ``cpu``: "cpu" for all cores, "cpu1" for core 1
    (``/proc/stat``; guest time is already in user)."""
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name == cpu:
                fields = [int(v) for v in values[:8]]
                total = sum(fields)
                return total - fields[3] - fields[4], total  # idle + iowait
    raise ValueError(f"no {cpu} in /proc/stat")


def machine_s() -> float:
    """Non-idle CPU seconds of the whole machine so far, all cores."""
    return core_ticks()[0] / TICK


def children_s() -> float:
    """CPU time of the children this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _minus(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """What each name used between two readings (names that ended meanwhile are lost)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v > before.get(k, 0.0)}


@dataclass
class Use:
    """CPU used over a ``with used(...)`` block: each group's seconds, the whole machine's busy
    seconds and the wall time; with ``threads_of``, that group's threads by name; with ``core``,
    that core's busy share; with ``beside``, those processes' seconds by command name."""

    groups: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0
    machine_s: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)
    core_busy: float = 0.0
    beside: dict[str, float] = field(default_factory=dict)

    def of(self, session: int) -> float:
        return self.groups[session]

    @property
    def total_s(self) -> float:
        return sum(self.groups.values())

    def figures(self, requests: int, busy_s: float | None = None) -> dict[str, float]:
        """The groups' CPU per request over ``requests`` and busy share over ``busy_s``
        (default: the wall time), and the machine's."""
        wall_s = busy_s or self.wall_s
        per_req = 1e6 / requests if requests else 0.0
        return {
            "server_cpu_s": self.total_s,
            "server_busy": self.total_s / wall_s if wall_s else 0.0,
            "cpu_us_per_req": self.total_s * per_req,
            "machine_busy_cores": self.machine_s / self.wall_s if self.wall_s else 0.0,
            "machine_cpu_us_per_req": self.machine_s * per_req,
        }


@contextmanager
def used(
    *sessions: int,
    threads_of: int | None = None,
    core: int | None = None,
    beside: Iterable[int] = (),
) -> Iterator[Use]:
    others = descendants(beside) if beside else set()
    use = Use()
    groups = {s: group_s(s) for s in sessions}
    wall, busy = time.monotonic(), machine_s()
    names = thread_s(threads_of) if threads_of is not None else {}
    ticks = core_ticks(f"cpu{core}") if core is not None else (0, 0)
    stack = by_name_s(others)
    try:
        yield use
    finally:
        use.groups = {s: group_s(s) - before for s, before in groups.items()}
        use.wall_s = time.monotonic() - wall
        use.machine_s = machine_s() - busy
        if threads_of is not None:
            use.threads = _minus(thread_s(threads_of), names)
        if core is not None:
            now = core_ticks(f"cpu{core}")
            use.core_busy = (now[0] - ticks[0]) / max(1, now[1] - ticks[1])
        with contextlib.suppress(OSError):
            use.beside = _minus(by_name_s(others), stack)
