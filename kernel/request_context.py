"""What follows one purchase from the gateway through Kafka to the writer (docs/operations.md,
Logs): a request id and a W3C trace context, carried in the Kafka message's headers.

The request id is a trusted proxy's ``X-Request-Id`` when it sent a well-formed one, else the
orderId itself: already minted, free, and recoverable from the order alone, so the outbox relay's
re-send (whose Redis entry holds only the event) and a message without headers still name it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUEST_ID = "request-id"  # the Kafka header names
TRACEPARENT = "traceparent"
# What a proxy's id may be: short, and nothing a log line or a header could be forged with.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
# https://www.w3.org/TR/trace-context/#traceparent-header-field-values: lowercase hex only.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_VERSION_00 = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16

Headers = list[tuple[str, str | bytes | None]]  # confluent-kafka's


def valid_request_id(text: str) -> bool:
    return _REQUEST_ID.fullmatch(text) is not None


def traceparent(text: str) -> str | None:
    """``text`` as a version-00 traceparent if it is a valid one, else None (ignored, never an
    error). Version 00 is exactly 55 characters; a later version may append fields after a
    dash, which are dropped: we pass on the version we understand, as the spec asks."""
    if len(text) == 55 and _VERSION_00.fullmatch(text) is not None:  # the common case, fast
        return None if text[3:35] == _ZERO_TRACE or text[36:52] == _ZERO_PARENT else text
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version in ("00", "ff") or trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None  # 00 of another length; ff is invalid
    if len(text) > 55 and text[55] != "-":
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


def trace_id(parent: str) -> str:
    """The trace id of a traceparent this module validated."""
    return parent[3:35]


def kafka_headers(request_id: str, parent: str | None) -> Headers:
    if parent is None:
        return [(REQUEST_ID, request_id.encode())]
    return [(REQUEST_ID, request_id.encode()), (TRACEPARENT, parent.encode())]


def from_kafka(headers: Headers | None, key: bytes | None) -> Context:
    """The context a message carries; a missing or malformed request id is the orderId (the
    message's key), so every order has one. Headers come from whoever could write the topic:
    validated again, never trusted into a log line as they are."""
    request_id = parent = None
    for name, value in headers or ():
        if value is None:
            continue
        text = value if isinstance(value, str) else value.decode("ascii", errors="replace")
        if name == REQUEST_ID:
            request_id = text if valid_request_id(text) else None
        elif name == TRACEPARENT:
            parent = traceparent(text)
    if request_id is None:
        request_id = (key or b"").decode("ascii", errors="replace")
        if not valid_request_id(request_id):
            request_id = "-"
    return Context(request_id, parent)


@dataclass(frozen=True, slots=True)
class Context:
    """One message's request id and traceparent (None: none came)."""

    request_id: str
    traceparent: str | None

    def log_fields(self) -> dict[str, str]:
        """For a log call's ``extra``: kernel/logs.py's JSON lines carry them as keys."""
        if self.traceparent is None:
            return {"request_id": self.request_id}
        return {"request_id": self.request_id, "trace_id": trace_id(self.traceparent)}
