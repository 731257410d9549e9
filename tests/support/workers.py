"""One local stack per pytest-xdist worker, so that the fault rows of one worker (which kill,
pause and slow the stack's servers) never reach the tests of another.

Worker ``gw0`` (and a run without xdist) uses the stack ``flashsale stack up`` starts. Worker
``gwN`` gets an environment in which every listener of the stack, the local gateway, the
writer's and the job's metrics and the fleet's names, subnet and balancer port move by
``N * PORT_STEP``, and its state lives in ``.stack-gwN``: a second stack, started by the
``live_stack`` fixture on first use and stopped when that worker's session ends.

The overlay is applied to ``os.environ`` before anything reads the settings, so every child a
test starts (gateways, writers, the CLI) inherits it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

import pytest

from kernel.resources import default_state_dir

WORKER_VARIABLE = "PYTEST_XDIST_WORKER"  # set by pytest-xdist in each worker: gw0, gw1, ...
PORT_STEP = 100


def worker_index(environ: Mapping[str, str]) -> int:
    worker = environ.get(WORKER_VARIABLE, "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


# A light worker runs at a lower CPU priority (tests/support/scheduling.py), and so do the
# gateways, balancers and clients its tests start: beside the rows, one of them can be off the
# CPU for over 2 s between opening a connection and writing its request head, and granian's and
# haproxy's 2 s head timeouts (wall time) then close connections a quiet machine would serve
# (two such failures in a quiet two-worker run). Their head timeouts are patient there; tests
# of those timeouts set their own, and the rows, on gw0, keep the shipped 2 s.
PATIENT_EDGES = {
    "FLASHSALE_GATEWAY_HEADER_TIMEOUT_MS": "30000",
    "FLASHSALE_EDGE_REQUEST_TIMEOUT_MS": "30000",
}


def stack_overlay(index: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The ``FLASHSALE_*`` variables that give worker ``index`` a stack of its own (none for 0)."""
    if index == 0:
        return {}
    step = index * PORT_STEP

    def at(port: int) -> str:
        return f"127.0.0.1:{port + step}"

    pg_port = 54329 + step
    return {
        "FLASHSALE_STATE_DIR": f"{default_state_dir(environ)}-gw{index}",
        "FLASHSALE_REDIS_NODES": ",".join(at(port) for port in range(7101, 7110)),
        "FLASHSALE_KAFKA_BOOTSTRAP": at(19092),
        "FLASHSALE_KAFKA_CONTROLLER_PORT": str(19093 + step),
        "FLASHSALE_PG_PORT": str(pg_port),
        "FLASHSALE_PG_DSN": f"postgresql://flashsale@127.0.0.1:{pg_port}/flashsale",
        "FLASHSALE_PROMETHEUS_PORT": str(19090 + step),
        "FLASHSALE_PROMETHEUS_URL": f"http://{at(19090)}",
        "FLASHSALE_REDIS_EXPORTER_PORT": str(19121 + step),
        "FLASHSALE_GATEWAY_PORT": str(8088 + step),
        "FLASHSALE_WRITER_METRICS_PORT": str(9108 + step),
        "FLASHSALE_RECONCILE_METRICS_PORT": str(9109 + step),
        "FLASHSALE_GATEWAY_TARGETS": at(8088),
        "FLASHSALE_WRITER_TARGETS": at(9108),
        "FLASHSALE_JOB_TARGETS": at(9109),
        "FLASHSALE_FLEET_NAME": f"fs{index}",
        # Clear of the default fleet's 10.77.0.0/24 and fleet.private's 10.78.k.0/24.
        "FLASHSALE_FLEET_SUBNET": f"10.{90 + index}.0.0/24",
        "FLASHSALE_FLEET_BALANCER_PORT": str(18500 + 1000 * index),
        **PATIENT_EDGES,
    }


def apply_worker_overlay(environ: MutableMapping[str, str]) -> int:
    """Give this process's worker its own stack; returns the worker's index."""
    index = worker_index(environ)
    environ.update(stack_overlay(index, environ))
    return index


def this_worker() -> int:
    return worker_index(os.environ)


# A module's fixed test ports lie in 18000-18499 (worker 0). Worker N >= 1 takes the block
# of 500 at 61000 + 500(N-1): above the kernel's ephemeral ports (32768-60999), where no
# outgoing connection holds one, and clear of the stacks' ports (below 20000 + 1000N).
TEST_PORTS = range(18000, 18500)
WORKER_TEST_PORTS_AT = 61000


def worker_port(port: int) -> int:
    """A module's fixed port (its gateway's, its proxy's) moved into this worker's block, so
    that two modules with the same port on two workers never meet."""
    if port not in TEST_PORTS:
        raise ValueError(f"a test's fixed port lies in {TEST_PORTS.start}-{TEST_PORTS.stop - 1}")
    index = this_worker()
    if index == 0:
        return port
    return WORKER_TEST_PORTS_AT + len(TEST_PORTS) * (index - 1) + port - TEST_PORTS.start


# What a module's tests cost, roughly, by their marks: the fault rows run a sale under load
# around a kill, a pause or a restart; a slow test takes seconds; an integration test a few
# round trips to the stack.
_COST_BY_MARK = (("faults", 30.0), ("slow", 10.0), ("integration", 1.0))


def _cost(item: pytest.Item) -> float:
    return next((cost for mark, cost in _COST_BY_MARK if item.get_closest_marker(mark)), 0.1)


EXCLUSIVE_GROUP = "exclusive"
# The whole-system rows: each runs a sale under load around a kill, a pause, a restart or an
# overload, calibrated to have the stack and the machine to themselves. Named here by path (not
# only by a mark) because the xdist controller, which hands out the work, sees only node ids.
ROW_MODULES = frozenset(
    {
        "tests/faults/test_arm_after_failover.py",
        "tests/faults/test_clock_skew.py",
        "tests/faults/test_process_faults.py",
        "tests/faults/test_redis_faults.py",
        "tests/faults/test_slow_network.py",
        "tests/faults/test_store_faults.py",
        "tests/system/test_broker_faults.py",
        "tests/system/test_bursts.py",
        "tests/system/test_graceful_shutdown.py",
    }
)


def work_group(nodeid: str) -> str:
    """The unit a worker is handed whole: the rows together (so no two of them ever run at
    once), any other module on its own (so its module fixtures start once)."""
    module = nodeid.split("::", 1)[0]
    return EXCLUSIVE_GROUP if module in ROW_MODULES else module


def schedule_by_module(items: list[pytest.Item]) -> None:
    """Mark the rows ``exclusive`` (``-m exclusive`` selects them); under xdist, order the
    groups (``work_group``) costliest first, so that no long one starts last (the scheduler in
    tests/support/scheduling.py keeps this order)."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = work_group(item.nodeid)
        if group == EXCLUSIVE_GROUP:
            item.add_marker(pytest.mark.exclusive)
        groups.setdefault(group, []).append(item)
    if WORKER_VARIABLE not in os.environ:
        return
    ordered = sorted(groups.values(), key=lambda group: -sum(map(_cost, group)))
    items[:] = [item for group in ordered for item in group]
