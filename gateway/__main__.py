"""``python -m gateway``: serve the gateway with granian (uvloop, one process per core)."""

from __future__ import annotations

import argparse

from granian.constants import HTTPModes, Interfaces, Loops
from granian.http import HTTP1Settings
from granian.log import LogLevels
from granian.server import Server

from gateway.auth import refuse_dev_secrets
from kernel import logs
from kernel.fd_limit import raise_open_files_limit
from kernel.settings import Settings, settings

# Descriptors a worker keeps for itself beyond its connections (Redis, Kafka, PostgreSQL,
# logs, the interpreter's own files).
_RESERVED_FDS = 512


def max_connections(cfg: Settings) -> int:
    """The setting, within this process's open-files limit (raised to its hard limit first;
    the workers inherit it)."""
    return max(1, min(cfg.gateway_max_connections, raise_open_files_limit() - _RESERVED_FDS))


def main() -> None:
    cfg = settings()
    refuse_dev_secrets(cfg)  # one clear line before any worker starts, not a worker's exit
    parser = argparse.ArgumentParser(prog="python -m gateway")
    parser.add_argument("--host", default=cfg.gateway_host)
    parser.add_argument("--port", type=int, default=cfg.gateway_port)
    parser.add_argument("--workers", type=int, default=cfg.gateway_workers)
    args = parser.parse_args()
    Server(
        "gateway.asgi:app",
        address=args.host,
        port=args.port,
        workers=args.workers,
        interface=Interfaces.ASGI,
        loop=Loops.uvloop,
        # HTTP/1 only: in "auto" mode granian first sniffs for an HTTP/2 preface with no
        # timeout, so a connection that never sends a byte was never closed (measured: still
        # open after 40 s); HTTP/1's header timeout applies from the first byte awaited.
        http=HTTPModes.http1,
        http1_settings=HTTP1Settings(header_read_timeout=cfg.gateway_header_timeout_ms),
        # One permit per open connection, held until it closes (granian's default, the backlog,
        # let 4,096 silent sockets starve every buyer).
        backpressure=max_connections(cfg),
        backlog=cfg.gateway_backlog,
        # SIGTERM: granian forwards it to each worker and waits for it; a worker drains, then
        # stops (gateway/shutdown.py). No workers_kill_timeout: its join races granian's own
        # watcher thread and kills workers that are exiting; the orchestrator's grace period
        # (SIGKILL) bounds a stop instead.
        log_access=False,
        log_level=LogLevels(cfg.log_level.lower()),
        log_dictconfig=logs.config(cfg),  # granian's lines and the app's, in one format
    ).serve()


if __name__ == "__main__":
    main()
