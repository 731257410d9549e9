"""One log format for every process (gateway, writer, jobs): lines on stderr, which whoever starts
the process sends to its log file (``flashsale demo``: ``.stack/logs/demo-<name>.log``).

``log_format``: ``text`` (the line below) or ``json``, one JSON object per line per event, for a
log shipper. The JSON is msgspec's (already a dependency), and every character that is not
printable is escaped, so untrusted text in a message cannot break the line or reach a terminal
raw; the formatter is a few lines of stdlib ``logging.Formatter``, which python-json-logger would
add a dependency for.
"""

from __future__ import annotations

import logging.config
import time
from typing import Any

import msgspec

from kernel.settings import Settings

FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
# What a log call may add with ``extra=`` (kernel/request_context.py): keys of a JSON line.
FIELDS = ("request_id", "trace_id", "order_id")
_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "pid", "msg"}`` plus any of FIELDS the record carries and
    ``exc`` (the traceback's text, escaped into the one line like everything else)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        text = _encode(line).decode()
        # JSON leaves DEL, C1 controls (a terminal's 8-bit CSI) and U+2028/2029 (line breaks to
        # many readers) raw: escaped too, so the line is printable and one line to any reader.
        return text if text.isprintable() else "".join(map(_printable, text))


def _printable(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _timestamp(created: float) -> str:
    """RFC 3339 in UTC, to the millisecond."""
    seconds = int(created)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{int((created - seconds) * 1000):03d}Z"


def config(cfg: Settings) -> dict[str, Any]:
    """For ``logging.config.dictConfig``, or granian's ``log_dictconfig`` (its workers apply it
    too): every logger through the root's one handler, at ``cfg.log_level``, in
    ``cfg.log_format``."""
    formatter: dict[str, Any] = (
        {"()": "kernel.logs.JsonFormatter"} if cfg.log_format == "json" else {"format": FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": formatter},
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
