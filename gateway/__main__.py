"""``python -m gateway``: serve the gateway with granian (uvloop, one process per core)."""

from __future__ import annotations

import argparse

from granian.constants import Interfaces, Loops
from granian.log import LogLevels
from granian.server import Server

from kernel import logs
from kernel.settings import settings


def main() -> None:
    cfg = settings()
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
        log_access=False,
        log_level=LogLevels(cfg.log_level.lower()),
        log_dictconfig=logs.config(cfg),  # granian's lines and the app's, in one format
        backlog=4096,
    ).serve()


if __name__ == "__main__":
    main()
