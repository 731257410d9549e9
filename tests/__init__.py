import os

from tests.support.scheduling import lower_priority_unless_rows_worker
from tests.support.workers import WORKER_VARIABLE, apply_worker_overlay

# Before any test module, conftest or support module reads the settings (some do at import):
# an xdist worker's stack of its own (tests/support/workers.py).
apply_worker_overlay(os.environ)
lower_priority_unless_rows_worker(os.environ.get(WORKER_VARIABLE))
