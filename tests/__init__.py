import os

from tests.support.workers import apply_worker_overlay

# Before any test module, conftest or support module reads the settings (some do at import):
# an xdist worker's stack of its own (tests/support/workers.py).
apply_worker_overlay(os.environ)
