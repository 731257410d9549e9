"""CPU used by the local stack's processes and the project's own (gateways, writers, jobs), by
group, over a window: what an idle stack costs, and where. Read from /proc: user + system time
of each process (all its threads), charged to the group of the process itself or of its nearest
ancestor that has one (granian's workers to their gateway, PostgreSQL's backends to postgres).

Groups: a stack server by its PID file's name without its number (``redis-7001`` → ``redis``,
``kafka-2`` → ``kafka``); a project process by its command (``python -m gateway`` and
``flashsale gateway`` → ``gateway``, ``-m writer`` → ``writer``, ``flashsale reconcile`` →
``reconcile``); haproxy (the fleet's balancer) → ``haproxy``. Anything else is the rest of the
machine, reported as one figure beside the groups.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_NUMBERED = re.compile(r"-\d+$")
_OWN_MODULES = ("gateway", "writer")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    cpu_s: float  # user + system so far, every thread
    argv: tuple[str, ...]


def snapshot(proc: Path = Path("/proc")) -> dict[int, Proc]:
    """Every process now: pid → its parent, CPU so far and command line."""
    found: dict[int, Proc] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            raw = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # it exited while we looked
        pid = int(stat.parent.name)
        cpu = (int(fields[11]) + int(fields[12])) / _TICK  # stat fields 14, 15: utime, stime
        argv = tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        found[pid] = Proc(pid, int(fields[1]), cpu, argv)
    return found


def stack_group(name: str) -> str:
    """A stack server's group from its PID file's name: the name without its number."""
    return _NUMBERED.sub("", name)


def own_group(argv: tuple[str, ...]) -> str | None:
    """The group of a project process from its command line, None for anything else."""
    if not argv:
        return None
    if Path(argv[0]).name == "haproxy":
        return "haproxy"
    if not Path(argv[0]).name.startswith("python") or len(argv) < 2:
        return None
    if "-m" in argv[1:-1]:  # python -m gateway, python -m flashsale gateway
        at = argv.index("-m", 1) + 1
    elif Path(argv[1]).name == "flashsale":  # .venv/bin/flashsale gateway (its shebang)
        at = 1
    else:
        return None
    module = argv[at]
    if module in _OWN_MODULES:
        return module
    if module.endswith("flashsale") and at + 1 < len(argv):
        return argv[at + 1]  # flashsale gateway, flashsale writer, flashsale reconcile, ...
    return None


def groups(procs: dict[int, Proc], named: dict[int, str], exclude: int) -> dict[int, str]:
    """pid → group, for every process in ``procs`` that has one (itself or an ancestor).
    ``named``: the stack's servers, pid → PID file name; ``exclude``: a process not counted
    (the one measuring)."""
    memo: dict[int, str | None] = {}

    def group_of(pid: int) -> str | None:
        if pid in memo:
            return memo[pid]
        memo[pid] = None  # until known (and a guard against a loop in a racing snapshot)
        proc = procs.get(pid)
        if proc is None or pid == exclude:
            found = None
        elif pid in named:
            found = stack_group(named[pid])
        else:
            found = own_group(proc.argv) or group_of(proc.ppid)
        memo[pid] = found
        return found

    return {pid: g for pid in procs if (g := group_of(pid)) is not None}


@dataclass(frozen=True, slots=True)
class Usage:
    seconds: float
    cores: dict[str, float]  # group → cores used on average over the window
    processes: dict[str, int]  # group → processes seen at the end of the window
    machine_cores: float  # every process's, the kernel's included (/proc/stat)


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _TICK  # not idle, not iowait


def measure(named: dict[int, str], seconds: float) -> Usage:
    """Each group's CPU over the next ``seconds``. A process started meanwhile counts from
    zero; one that ended meanwhile is not counted (its last seconds are lost)."""
    before, busy, started = snapshot(), _machine_busy_s(), time.monotonic()
    time.sleep(seconds)
    after, busy, elapsed = snapshot(), _machine_busy_s() - busy, time.monotonic() - started
    cores: dict[str, float] = {}
    counts: dict[str, int] = {}
    for pid, group in groups(after, named, os.getpid()).items():
        earlier = before.get(pid)
        used = after[pid].cpu_s - (earlier.cpu_s if earlier is not None else 0.0)
        cores[group] = cores.get(group, 0.0) + used / elapsed
        counts[group] = counts.get(group, 0) + 1
    ordered = dict(sorted(cores.items(), key=lambda kv: -kv[1]))
    return Usage(elapsed, ordered, counts, busy / elapsed)
