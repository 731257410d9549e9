"""Reading and judging the gateway's answers.

Every answer is recorded under a name made of its endpoint, status and code (``purchase 202
PENDING``, ``purchase 410 SOLD_OUT``, ``purchase 409 ALREADY_PURCHASED``...), so Locust's own
tables, CSVs and the master's aggregation count the answers per kind, latency included. An
answer is a failure when its status or code is not one the endpoint may give, when a 429 or 503
lacks ``Retry-After``, or on any other 5xx: "no 5xx except deliberate 503s with Retry-After".
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# status -> the codes it may carry (``status`` of a 2xx body, ``error`` of the others).
Expected = Mapping[int, frozenset[str]]

PURCHASE: Expected = {
    202: frozenset({"PENDING"}),
    403: frozenset({"SALE_NOT_OPEN"}),  # a clock a little ahead of the server's
    409: frozenset({"ALREADY_PURCHASED"}),
    410: frozenset({"SOLD_OUT"}),
    429: frozenset({"RATE_LIMITED"}),
}
# With a waiting room (docs/waiting-room.md): a purchase needs the buyer's admission.
ROOM_PURCHASE: Expected = {**PURCHASE, 403: frozenset({"SALE_NOT_OPEN", "ADMISSION_REQUIRED"})}
QUEUE_JOIN: Expected = {
    200: frozenset({""}),
    403: frozenset({"PROOF_OF_WORK_REQUIRED"}),
    410: frozenset({"SOLD_OUT"}),
    429: frozenset({"RATE_LIMITED"}),
}
QUEUE_POLL: Expected = {
    200: frozenset({""}),
    410: frozenset({"SOLD_OUT"}),
    429: frozenset({"RATE_LIMITED"}),
}
ORDER: Expected = {200: frozenset({"PENDING", "PAID", "EXPIRED", "CANCELLED", "FAILED"})}
PAY: Expected = {
    200: frozenset({"PAID"}),
    409: frozenset({"ORDER_PROCESSING", "ORDER_EXPIRED", "ORDER_FAILED"}),
}
CANCEL: Expected = {
    200: frozenset({"CANCELLED"}),
    409: frozenset({"ORDER_PROCESSING", "ORDER_PAID", "ORDER_EXPIRED", "ORDER_FAILED"}),
}
VOUCHER_RESERVE: Expected = {
    201: frozenset({""}),
    409: frozenset({"OUT_OF_STOCK", "ALREADY_USED"}),
}
VOUCHER_CONFIRM: Expected = {
    200: frozenset({"CONFIRMED"}),
    409: frozenset({"RESERVATION_PROCESSING", "RESERVATION_EXPIRED", "RESERVATION_FAILED"}),
}
VOUCHER_RELEASE: Expected = {
    200: frozenset({"RELEASED"}),
    409: frozenset({"RESERVATION_PROCESSING", "ALREADY_CONFIRMED"}),
}


class Reply(Protocol):
    """What we use of Locust's ``ResponseContextManager`` (``catch_response=True``)."""

    request_meta: dict[str, Any]

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Any: ...

    @property
    def content(self) -> bytes | None: ...

    def json(self) -> Any: ...

    def success(self) -> None: ...

    def failure(self, exc: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    status: int  # 0: no answer (timeout, connection refused or reset)
    code: str  # a 2xx body's ``status``, an error's ``error``; "" when absent
    body: dict[str, Any]
    retry_after: int | None

    @property
    def order_id(self) -> str | None:
        value = self.body.get("orderId")
        return value if isinstance(value, str) else None

    def stat_name(self, endpoint: str) -> str:
        if self.status == 0:
            return f"{endpoint} no answer"
        return f"{endpoint} {self.status} {self.code}".rstrip()

    def problem(self, expected: Expected) -> str | None:
        """Why this answer is wrong for the endpoint, or None."""
        if self.status == 0:
            return "no answer"
        if self.status in (429, 503) and self.retry_after is None:
            return f"{self.status} without Retry-After"
        if self.status == 503:
            return None  # deliberate: could not decide safely, try again later
        codes = expected.get(self.status)
        if codes is None or self.code not in codes:
            return f"unexpected {self.status} {self.code}".rstrip()
        if self.status == 202 and not _is_uuid(self.order_id):
            return "202 without an orderId"
        if self.code == "ALREADY_PURCHASED" and not _is_uuid(self.order_id):
            return "ALREADY_PURCHASED without the orderId"
        return None


def read(reply: Reply) -> Answer:
    status = reply.status_code or 0
    body: dict[str, Any] = {}
    if status and reply.content:
        try:
            parsed = reply.json()
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    field = "status" if 200 <= status < 300 else "error"
    code = body.get(field)
    return Answer(status, code if isinstance(code, str) else "", body, _retry_after(reply))


def _retry_after(reply: Reply) -> int | None:
    headers = reply.headers
    value = headers.get("retry-after") if headers is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _is_uuid(value: str | None) -> bool:
    if value is None:
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
