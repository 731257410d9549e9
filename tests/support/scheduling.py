"""How the pytest-xdist workers share the machine (``--dist loadgroup``).

The whole-system rows (``work_group``'s ``exclusive`` group, tests/support/workers.py) run on
worker ``gw0``, at full priority, on the stack ``flashsale stack up`` starts. Every other worker
takes only the other modules, on a stack of its own, at a lower CPU priority, so that its load
fills the rows' idle time instead of competing with the sale a row measures. Groups are handed
out in the collected order (the costliest first), not xdist's order by test count.

The groups come from the node ids' paths, not from ``xdist_group`` marks: xdist 3.8 puts a
mark's group into ``item._nodeid``, which pytest 9 no longer reads, so under it every test was
a unit of its own and two rows could run at once.
"""

from __future__ import annotations

import os

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

from tests.support.workers import EXCLUSIVE_GROUP, work_group

ROWS_WORKER = "gw0"
# A worker that runs no rows gets about a tenth of a busy core's time (CFS weight 110 against
# 1024): enough that its own stack's brokers keep their 1.5 s session alive, little enough that
# a row's deadline is not spent on another worker's tests.
LIGHT_WORKER_NICENESS = 10


class RowsOnFirstWorker(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no py.typed
    """Hands the ``exclusive`` group to ``gw0`` only; the others take the remaining groups in
    collected order. A worker with nothing left that it may take is shut down."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep the costliest-first collected order

    def _split_scope(self, nodeid: str) -> str:
        return work_group(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        allowed = [
            scope
            for scope in self.workqueue
            if node.gateway.id == ROWS_WORKER or scope != EXCLUSIVE_GROUP
        ]
        if not allowed:
            node.shutdown()
            return
        self.workqueue.move_to_end(allowed[0], last=False)
        super()._assign_work_unit(node)


def lower_priority_unless_rows_worker(worker: str | None) -> None:
    """Run a light worker (and the stack and the gateways it starts) at a lower priority."""
    if worker is not None and worker != ROWS_WORKER:
        os.nice(LIGHT_WORKER_NICENESS)
