"""CPU by group (flashsale/stack/cpu.py): processes are charged to their own group or their
nearest ancestor's, the measuring process to none; and a busy child is measured."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flashsale.stack.cpu import Proc, groups, measure, own_group, snapshot, stack_group

PY = "/srv/app/.venv/bin/python"


@pytest.mark.parametrize(
    ("argv", "group"),
    [
        ((PY, "-m", "gateway"), "gateway"),
        ((PY, "-m", "gateway", "--workers", "2", "--port", "18088"), "gateway"),
        (("ip", "netns", "exec", "fsf-1", PY, "-m", "gateway"), None),  # its child is the one
        ((PY, "-m", "writer", "--metrics-port", "0"), "writer"),
        ((PY, "-m", "flashsale", "reconcile", "--every", "1"), "reconcile"),
        ((PY, "/srv/app/.venv/bin/flashsale", "gateway"), "gateway"),
        (("/usr/sbin/haproxy", "-f", "haproxy.cfg"), "haproxy"),
        ((PY, "-m", "pytest", "tests/x.py", "-m", "not integration"), None),
        (("/usr/bin/ruff", "check", "flashsale", "gateway"), None),
        (("redis-server", "127.0.0.1:7001"), None),  # the stack's are known by PID file
        ((), None),  # a kernel thread
    ],
)
def test_a_project_process_is_grouped_by_its_command(
    argv: tuple[str, ...], group: str | None
) -> None:
    assert own_group(argv) == group


def test_a_stack_server_is_grouped_by_its_pid_files_name_without_its_number() -> None:
    assert [stack_group(n) for n in ("redis-7001", "kafka-2", "kafka", "redis-failover-watch")] == [
        "redis",
        "kafka",
        "kafka",
        "redis-failover-watch",
    ]


def test_a_process_is_charged_to_its_nearest_grouped_ancestor() -> None:
    procs = {
        p.pid: p
        for p in [
            Proc(1, 0, 0.0, ("init",)),
            Proc(10, 1, 0.0, ("postgres", "-D", "data")),  # a stack server, by PID file
            Proc(11, 10, 0.0, ("postgres: checkpointer",)),
            Proc(20, 1, 0.0, ("bash",)),
            Proc(21, 20, 0.0, (PY, "-m", "gateway")),
            Proc(22, 21, 0.0, (PY, "-c", "granian worker")),
            Proc(30, 20, 0.0, (PY, "-m", "flashsale", "stack", "cpu")),  # the one measuring
            Proc(31, 30, 0.0, (PY, "-m", "gateway")),  # what it started is counted
            Proc(40, 99, 0.0, (PY, "-m", "writer")),  # its parent gone meanwhile
        ]
    }
    assert groups(procs, {10: "postgres"}, exclude=30) == {
        10: "postgres",
        11: "postgres",
        21: "gateway",
        22: "gateway",
        31: "gateway",
        40: "writer",
    }


def test_a_busy_child_is_measured_and_the_measuring_process_is_not() -> None:
    assert os.getpid() in snapshot()
    busy = "import time\nend = time.monotonic() + 5\nwhile time.monotonic() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        usage = measure({child.pid: "redis-7001"}, 0.5)
    finally:
        child.kill()
        child.wait()
    # One thread spinning: up to a core (less on a shared machine), never more.
    assert 0.05 < usage.cores["redis"] <= 1.05, usage
    assert usage.processes["redis"] == 1
    assert usage.machine_cores >= usage.cores["redis"] - 0.05
