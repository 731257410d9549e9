"""The local stack's Redis failover watch (jobs/redis_failover.py) as a process of its own, by
PID file like the servers: up after the Redis Cluster, down before it (a cluster being stopped
node by node refuses connections, and must not be failed over on the way down)."""

from __future__ import annotations

import sys

from flashsale.stack.processes import Managed, StackError, wait_until
from kernel.settings import Settings

_MARKER = "failover-watch"


class FailoverWatcher:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.proc = Managed("redis-failover-watch", cfg.state_dir)

    def processes(self) -> list[Managed]:
        return [self.proc]

    def up(self) -> None:
        if self.proc.pid() is not None:
            return
        log = self.proc.log_file
        since = log.stat().st_size if log.exists() else 0  # the log is appended to
        # The environment (FLASHSALE_*) is inherited: the watch sees the stack's settings.
        self.proc.start([sys.executable, "-m", "flashsale", _MARKER], marker=_MARKER)
        if not wait_until(lambda: _logged_start(self, since), 10):
            raise StackError(f"the failover watch did not start; see {self.proc.log_file}")

    def down(self) -> bool:
        return self.proc.stop()

    def status(self) -> str:
        pid = self.proc.pid()
        if pid is None:
            return "not running"
        every = self.cfg.redis_failover_probe_ms
        return f"pid {pid}, probing every primary every {every} ms"


def _logged_start(watcher: FailoverWatcher, since: int) -> bool:
    if watcher.proc.pid() is None:
        raise StackError(f"the failover watch exited; see {watcher.proc.log_file}")
    try:
        with watcher.proc.log_file.open("rb") as log:
            log.seek(since)
            return b"watching" in log.read()
    except FileNotFoundError:
        return False
