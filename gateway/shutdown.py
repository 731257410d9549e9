"""A gateway worker's graceful stop: on SIGTERM it fails its readiness first, then stops
accepting, then its lifespan shutdown finishes the rest (Services.close, gateway/services.py).

granian (2.8) stops a worker at once on SIGTERM: its listener stops, each connection finishes the
request it is serving (idle keep-alive ones close), and only once every connection is done does
the ASGI lifespan shutdown run; its main process forwards a SIGTERM to each worker and waits for
it. This takes over the worker's SIGTERM to put the drain delay in front: /readyz answers 503
NOT_READY (``draining``) while requests are still served, so a balancer stops sending any before
one could be refused. After the delay the worker sends itself SIGINT, for which it keeps
granian's own handler: granian's stop, as above.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)


class Drain:
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.since: float | None = None  # time.monotonic() of the SIGTERM

    @property
    def draining(self) -> bool:
        return self.since is not None

    def install(self) -> None:
        """SIGTERM starts the drain from now on (a signal handler lives on the main thread's
        loop only: elsewhere, under a test's loop, this does nothing)."""
        if threading.current_thread() is threading.main_thread():
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.begin)

    def begin(self) -> None:
        if self.since is not None:
            return  # a second SIGTERM (the group's and granian's own): one drain
        self.since = time.monotonic()
        log.info("SIGTERM: /readyz fails for %.1f s, then no new connections", self.delay_s)
        asyncio.get_running_loop().call_later(self.delay_s, _stop_accepting)


def _stop_accepting() -> None:
    log.info("drain delay over: no new connections; the requests in flight finish")
    os.kill(os.getpid(), signal.SIGINT)  # granian's handler: its graceful stop
