"""The local stack's servers as tests see them: a server's PID, and a server paused for a block
(SIGSTOP, then SIGCONT even when the block fails) to fake a hung broker or node."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from flashsale.stack.processes import Managed
from kernel.settings import Settings


def server_pid(cfg: Settings, name: str) -> int:
    """The PID of the stack's server ``name`` (``kafka``, ``postgres``, ``redis-7101``...)."""
    pid = Managed(name, cfg.state_dir).pid()
    assert pid is not None, f"the stack's {name} is not running"
    return pid


def kafka_pids(cfg: Settings) -> list[int]:
    """Every broker of the stack's Kafka (``kafka`` alone, or ``kafka-1`` … ``kafka-N``)."""
    names = (
        ["kafka"]
        if cfg.kafka_brokers == 1
        else [f"kafka-{n + 1}" for n in range(cfg.kafka_brokers)]
    )
    return [server_pid(cfg, name) for name in names]


@contextmanager
def paused(*pids: int) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
