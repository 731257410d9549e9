"""One log format for every process (gateway, writer, jobs): lines on stderr, which whoever starts
the process sends to its log file (``flashsale demo``: ``.stack/logs/demo-<name>.log``)."""

from __future__ import annotations

import logging.config
from typing import Any

from kernel.settings import Settings

FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"


def config(cfg: Settings) -> dict[str, Any]:
    """For ``logging.config.dictConfig``, or granian's ``log_dictconfig`` (its workers apply it
    too): every logger through the root's one handler, at ``cfg.log_level``."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"format": FORMAT}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "line",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": cfg.log_level.upper(), "handlers": ["stderr"]},
        "loggers": {},  # replaces granian's, whose handlers this leaves out
    }


def setup(cfg: Settings) -> None:
    logging.config.dictConfig(config(cfg))
