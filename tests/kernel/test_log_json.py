"""FLASHSALE_LOG_FORMAT=json: one JSON object per line per event, whatever a client wrote into
the message; the request context's validation (kernel/request_context.py)."""

from __future__ import annotations

import dataclasses
import io
import logging
import pkgutil

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import logs
from kernel.request_context import from_kafka, kafka_headers, traceparent, valid_request_id
from kernel.settings import Settings, load_settings

_FORGERY = "/x\r\n2026-01-01 00:00:00,000 1 gateway.app INFO admin logged in\x1b[2J\u2028"
_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _json_logger(cfg: Settings) -> tuple[logging.Logger, io.StringIO]:
    """A logger with the formatter logs.config names for ``json`` (resolved as dictConfig does)."""
    spec = logs.config(dataclasses.replace(cfg, log_format="json"))["formatters"]["line"]
    formatter = pkgutil.resolve_name(spec["()"])()
    assert isinstance(formatter, logs.JsonFormatter)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(f"test.json.{id(stream)}")
    logger.propagate = False
    logger.handlers = [handler]
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_json_lines_are_one_object_per_event(cfg: Settings) -> None:
    logger, stream = _json_logger(cfg)
    logger.warning("GET %s: %s", _FORGERY, "reset\nby peer")
    logger.info("order stored", extra={"request_id": "edge-1", "trace_id": "4bf9", "x": 1})
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        logger.exception("unhandled on %s", _FORGERY)
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 4  # three events, three lines
    first, second, third = (msgspec.json.decode(line) for line in lines[:3])
    for line in lines[:3]:
        assert "\r" not in line and "\x1b" not in line and "\u2028" not in line
    assert first["msg"] == f"GET {_FORGERY}: reset\nby peer"  # the text, intact once decoded
    assert first["level"] == "WARNING" and first["logger"] == logger.name
    assert first["ts"].endswith("Z") and "request_id" not in first
    assert second["request_id"] == "edge-1" and second["trace_id"] == "4bf9"
    assert "x" not in second  # only the known fields
    assert "ValueError: bad\nthing" in third["exc"]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80))
def test_any_message_is_one_valid_line(text: str) -> None:
    record = logging.LogRecord("gateway", logging.WARNING, __file__, 1, "%s", (text,), None)
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line and "\r" not in line and line.isprintable()
    assert msgspec.json.decode(line)["msg"] == text


def test_the_format_is_a_checked_setting() -> None:
    assert load_settings({"FLASHSALE_LOG_FORMAT": "json"}).log_format == "json"
    assert logs.config(load_settings({}))["formatters"]["line"] == {"format": logs.FORMAT}
    with pytest.raises(SystemExit, match="FLASHSALE_LOG_FORMAT='xml'"):
        load_settings({"FLASHSALE_LOG_FORMAT": "xml"})


@pytest.mark.parametrize(
    ("header", "passed_on"),
    [
        (_TRACEPARENT, _TRACEPARENT),
        (_TRACEPARENT.upper(), None),  # lowercase hex only
        (_TRACEPARENT + "-", None),  # version 00 is exactly 55 characters
        (_TRACEPARENT[:-1], None),
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None),  # all-zero trace id
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01", None),
        ("ff" + _TRACEPARENT[2:], None),  # version ff is invalid
        ("0g" + _TRACEPARENT[2:], None),
        (" " + _TRACEPARENT, None),
        ("01" + _TRACEPARENT[2:], _TRACEPARENT),  # a later version, downgraded to ours
        ("01" + _TRACEPARENT[2:] + "-future", _TRACEPARENT),
        ("01" + _TRACEPARENT[2:] + "x", None),  # its extra fields must follow a dash
        ("", None),
    ],
)
def test_a_traceparent_is_validated_strictly(header: str, passed_on: str | None) -> None:
    assert traceparent(header) == passed_on


def test_request_ids_from_kafka_are_checked_again() -> None:
    order_id = b"0190abcd-1234-8abc-9abc-0123456789ab"
    carried = from_kafka(kafka_headers("edge-7f3a", _TRACEPARENT), order_id)
    assert (carried.request_id, carried.traceparent) == ("edge-7f3a", _TRACEPARENT)
    assert carried.log_fields() == {
        "request_id": "edge-7f3a",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    }
    # No header (the outbox relay's re-send, a voucher use): the orderId is the request id.
    assert from_kafka(None, order_id).request_id == order_id.decode()
    forged = from_kafka([("request-id", b"a\nb"), ("traceparent", b"junk")], order_id)
    assert (forged.request_id, forged.traceparent) == (order_id.decode(), None)
    assert not valid_request_id("x" * 129) and not valid_request_id("")
    assert valid_request_id("Root=1-5759e988-bd862e3fe1be46a994272793")
