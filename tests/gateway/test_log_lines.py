"""What a client wrote reaches a log line escaped: a path with line breaks or terminal escapes
cannot forge a second line or repaint the operator's terminal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import Response

from gateway.exception_map import dependency_error, internal_error

Handler = Callable[[Request, Exception], Coroutine[Any, Any, Response]]


def _request(path: str) -> Request:
    return Request(
        {
            "type": "http",
            "method": "GET",
            "path": path,
            "raw_path": path.encode("utf-8", "surrogateescape"),
            "query_string": b"",
            "headers": [],
            "scheme": "http",
            "server": ("127.0.0.1", 8088),
            "root_path": "",
        }
    )


_FORGERY = "/x\r\n2026-01-01 00:00:00,000 1 gateway.app INFO admin logged in\x1b[2J"


@pytest.mark.parametrize("handler", [dependency_error, internal_error])
def test_a_forged_line_stays_on_its_own(handler: Handler, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.exception_map"):
        response = asyncio.run(handler(_request(_FORGERY), OSError("reset\nby peer")))
    assert response.status_code in (500, 503)
    [record] = caplog.records
    line = record.getMessage()
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "admin logged in\\x1b[2J" in line  # (the URL parser drops CR and LF itself)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@settings(max_examples=200, deadline=None)
@given(path=st.text(max_size=60))
def test_any_path_is_one_printable_line(path: str) -> None:
    logger = logging.getLogger("gateway.exception_map")
    kept = _Kept()
    logger.addHandler(kept)
    try:
        asyncio.run(dependency_error(_request("/" + path), OSError("down")))
    finally:
        logger.removeHandler(kept)
    records = kept.records
    [record] = records
    assert record.getMessage().isprintable()
