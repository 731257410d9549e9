"""Keeps one child running: started again whenever it exits (the sold-out agent of a fleet).

``python -m flashsale.fleet.supervise <state dir> <name> <marker> <argv...>`` runs ``argv`` as
``Managed(name, state dir)`` (its PID file and log, so ``fleet down`` stops it even should this
supervisor die first), restarting it RESTART_MIN_S after an exit, doubling up to RESTART_MAX_S
while it keeps failing at once. SIGTERM or SIGINT stop the child, then the supervisor.

Hand-written rather than supervisord: one child, restart on exit, no daemon, configuration
file or RPC socket of its own to manage beside the fleet's PID files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from flashsale.stack.processes import Managed
from kernel.logs import setup
from kernel.settings import settings

log = logging.getLogger(__name__)
RESTART_MIN_S = 0.2
RESTART_MAX_S = 5.0


def supervise(child: Managed, marker: str, argv: list[str]) -> None:
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        child.stop(timeout=10.0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = RESTART_MIN_S
    while not stopping.is_set():
        started = time.monotonic()
        pid = child.start(argv, marker=marker)
        # We are its parent: wait for its exit itself, not its command line (which reads
        # empty while it execs). A SIGTERM meanwhile stops it, and this returns.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if stopping.is_set():
            break
        ran = time.monotonic() - started
        backoff = RESTART_MIN_S if ran >= RESTART_MAX_S else min(RESTART_MAX_S, backoff * 2)
        log.warning(
            "%s (pid %d) exited after %.1f s; again in %.1f s", child.name, pid, ran, backoff
        )
        stopping.wait(backoff)
    child.stop(timeout=10.0)


def main() -> None:
    setup(settings())
    state_dir, name, marker, *argv = sys.argv[1:]
    supervise(Managed(name, Path(state_dir)), marker, argv)


if __name__ == "__main__":
    main()
