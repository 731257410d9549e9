"""Named failpoints for fault tests: ``failpoint("writer.after_commit")`` kills the process with
SIGKILL when ``FLASHSALE_FAILPOINTS`` names it, and does nothing otherwise."""

from __future__ import annotations

import os
import signal

from kernel.settings import settings


def failpoint(name: str) -> None:
    if name in settings().failpoints:
        os.kill(os.getpid(), signal.SIGKILL)
