"""The HTTP API as an OpenAPI 3.1 document, served at ``GET /openapi.json``.

Built from the msgspec types the handlers decode (domain/) and answer with (gateway/bodies.py)
by ``msgspec.json.schema_components``, and from the table below: each route's status codes and,
for each refusal, the error codes it can carry (gateway/errors.py). A copy is kept in the
repository; tests/gateway/test_openapi.py fails when it is stale. Regenerate it with

    .venv/bin/python -m gateway.openapi > docs/openapi.json
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from domain.sales import NewSale, RoomControls
from domain.vouchers import CODE_PATTERN, ORDER_ID_PATTERN, NewVoucher, ReservationRequest
from gateway import bodies
from gateway.paths import ungated
from gateway.waiting_room.controls import RoomState

# Of the API contract: bump it when a client would notice the change (2.0.0: a poll needs the
# buyer's token).
VERSION = "2.0.0"

# The error codes each route can answer, by status, beside its one success answer.
Errors = dict[int, tuple[str, ...]]
_UNAVAILABLE: Errors = {503: ("UNAVAILABLE",)}  # a dependency (Redis, Kafka, PostgreSQL) failed
_LIMITED: Errors = {429: ("RATE_LIMITED",)}
_BAD_BODY = ("INVALID_REQUEST", "BODY_TOO_LARGE")
# What the edge answers before a route's own work, on every route but the probes
# (gateway/admission.py, ungated) and on every route that reads a body
# (gateway/body_deadline.py).
_SHED: Errors = {503: ("OVERLOADED",)}
_SLOW_BODY: Errors = {408: ("REQUEST_TIMEOUT",)}
_BEARER_LIMITED = ("admin", "service")  # the shared-secret schemes of _SECURITY


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    tag: str
    ok: tuple[int, type | None]  # status and body type (None: not JSON, see `media`)
    errors: Errors
    auth: str | None = None  # a key of _SECURITY
    body: type | None = None
    media: str = "application/json"
    parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # required request header → its use


def _ecma(pattern: str) -> str:
    """A Python pattern as JSON Schema reads it: ``\\Z`` (no newline before the end) is ECMA
    262's plain ``$``."""
    return re.sub(r"\\Z$", "$", pattern)


_DIGITS_ID = {"type": "integer", "minimum": 1, "maximum": 10**15 - 1}
_TEXT = {"type": "string"}
_ITEM = {"item_id": _DIGITS_ID}
_SALE = {"sale_id": _DIGITS_ID}
_ORDER = {"order_id": {"type": "string", "format": "uuid"}}
_CODE = {"code": {"type": "string", "pattern": _ecma(CODE_PATTERN)}}
_RESERVATION = {**_CODE, "order_id": {"type": "string", "pattern": _ecma(ORDER_ID_PATTERN)}}
_SECURITY = {
    "buyer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
    "admin": {"type": "http", "scheme": "bearer", "description": "FLASHSALE_ADMIN_TOKEN"},
    "service": {"type": "http", "scheme": "bearer", "description": "FLASHSALE_SERVICE_TOKEN"},
}

# A waiting room's controls (gateway/room_admin.py); a 503 after a change was recorded: the
# gateways' ticks apply it (gateway/waiting_room/controls.py).
_ROOM_ERRORS: Errors = {
    401: ("UNAUTHORIZED",),
    404: ("SALE_NOT_FOUND",),
    409: ("NO_WAITING_ROOM",),
    **_UNAVAILABLE,
}

OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/healthz", "The process answers", "ops", (200, bodies.Health), {}),
    Operation(
        "get",
        "/readyz",
        "Redis and Kafka are reachable",
        "ops",
        (200, bodies.Ready),
        {**_LIMITED, 503: ("NOT_READY",)},
    ),
    Operation(
        "get",
        "/metrics",
        "Prometheus metrics",
        "ops",
        (200, None),
        _LIMITED,
        media="text/plain",
    ),
    Operation("get", "/openapi.json", "This document", "ops", (200, None), {}),
    Operation(
        "post",
        "/api/flash-sales/items/{item_id}/purchase",
        "Buy one unit of an item",
        "buyer",
        (202, bodies.OrderAccepted),
        {
            401: ("UNAUTHORIZED",),
            403: ("SALE_NOT_OPEN", "ADMISSION_REQUIRED"),
            404: ("ITEM_NOT_FOUND",),
            409: ("ALREADY_PURCHASED",),
            410: ("SOLD_OUT",),
            429: ("RATE_LIMITED",),
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_ITEM,
    ),
    Operation(
        "post",
        "/api/flash-sales/sales/{sale_id}/queue",
        "Join a sale's waiting room: a signed ticket (the same one when joining again)",
        "buyer",
        (200, bodies.QueueTicket),
        {
            401: ("UNAUTHORIZED",),
            403: ("SALE_NOT_OPEN", "PROOF_OF_WORK_REQUIRED"),
            404: ("SALE_NOT_FOUND",),
            410: ("SOLD_OUT",),
            **_LIMITED,
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_SALE,
    ),
    Operation(
        "get",
        "/api/flash-sales/sales/{sale_id}/queue",
        "Poll the buyer's own waiting-room ticket: WAITING with Retry-After, or ADMITTED",
        "buyer",
        (200, bodies.QueueStatus),
        {
            401: ("UNAUTHORIZED", "INVALID_TICKET"),
            403: ("TICKET_NOT_YOURS",),
            404: ("SALE_NOT_FOUND",),
            410: ("SOLD_OUT",),
            **_LIMITED,
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_SALE,
        headers={"X-Queue-Ticket": "the ticket the join (or the last poll) answered with"},
    ),
    Operation(
        "get",
        "/api/flash-sales/orders/{order_id}",
        "The buyer's order",
        "buyer",
        (200, bodies.Order),
        {401: ("UNAUTHORIZED",), 404: ("ORDER_NOT_FOUND",), **_LIMITED, **_UNAVAILABLE},
        auth="buyer",
        parameters=_ORDER,
    ),
    Operation(
        "get",
        "/api/flash-sales/items/{item_id}/order",
        "The buyer's order for an item, for a holder who lost the answer naming it (a"
        " purchase answers 410 to everyone once the item is sold out)",
        "buyer",
        (200, bodies.Order),
        {
            401: ("UNAUTHORIZED",),
            404: ("ITEM_NOT_FOUND", "ORDER_NOT_FOUND"),
            **_LIMITED,
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_ITEM,
    ),
    Operation(
        "post",
        "/api/flash-sales/orders/{order_id}/pay",
        "Pay a pending order (paying twice answers the same)",
        "buyer",
        (200, bodies.OrderPaid),
        {
            401: ("UNAUTHORIZED",),
            404: ("ORDER_NOT_FOUND",),
            409: ("ORDER_EXPIRED", "ORDER_FAILED", "ORDER_PROCESSING"),
            **_LIMITED,
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_ORDER,
    ),
    Operation(
        "post",
        "/api/flash-sales/orders/{order_id}/cancel",
        "Cancel a pending order; its unit goes back on sale",
        "buyer",
        (200, bodies.OrderCancelled),
        {
            401: ("UNAUTHORIZED",),
            404: ("ORDER_NOT_FOUND",),
            409: (
                "ORDER_PAID",
                "ORDER_EXPIRED",
                "ORDER_FAILED",
                "ORDER_PENDING",
                "ORDER_PROCESSING",
            ),
            **_LIMITED,
            **_UNAVAILABLE,
        },
        auth="buyer",
        parameters=_ORDER,
    ),
    Operation(
        "post",
        "/admin/sales",
        "Create a sale and its items",
        "admin",
        (201, bodies.SaleCreated),
        {400: _BAD_BODY, 401: ("UNAUTHORIZED",), **_UNAVAILABLE},
        auth="admin",
        body=NewSale,
    ),
    Operation(
        "post",
        "/admin/sales/{sale_id}/arm",
        "Load a sale's stock into Redis and open it",
        "admin",
        (200, bodies.SaleArmed),
        {
            401: ("UNAUTHORIZED",),
            404: ("SALE_NOT_FOUND",),
            409: ("NOT_READY_TO_ARM", "SALE_LIVE"),
            **_UNAVAILABLE,
        },
        auth="admin",
        parameters=_SALE,
    ),
    Operation(
        "get",
        "/admin/sales/{sale_id}/room",
        "A waiting room's controls and how far its frontier has come",
        "admin",
        (200, RoomState),
        _ROOM_ERRORS,
        auth="admin",
        parameters=_SALE,
    ),
    Operation(
        "post",
        "/admin/sales/{sale_id}/room",
        "Pause or resume a waiting room, or set its admission rate, from now on",
        "admin",
        (200, RoomState),
        {400: _BAD_BODY, **_ROOM_ERRORS},
        auth="admin",
        body=RoomControls,
        parameters=_SALE,
    ),
    Operation(
        "get",
        "/admin/items/{item_id}",
        "An item's live counters, per shard",
        "admin",
        (200, bodies.ItemCounters),
        {401: ("UNAUTHORIZED",), 404: ("ITEM_NOT_FOUND",), **_UNAVAILABLE},
        auth="admin",
        parameters=_ITEM,
    ),
    Operation(
        "post",
        "/vouchers/{code}/reservations",
        "Take a use of a voucher for an order (idempotent by orderId)",
        "vouchers",
        (201, bodies.Reservation),
        {
            400: _BAD_BODY,
            401: ("UNAUTHORIZED",),
            404: ("VOUCHER_NOT_FOUND",),
            409: ("OUT_OF_STOCK", "ALREADY_USED", "ORDER_ID_CONFLICT", "RESERVATION_EXPIRED"),
            422: ("NOT_ELIGIBLE",),
            503: ("UNAVAILABLE", "VOUCHER_NOT_ARMED"),
        },
        auth="service",
        body=ReservationRequest,
        parameters=_CODE,
    ),
    Operation(
        "post",
        "/vouchers/{code}/reservations/{order_id}/confirm",
        "Confirm a reserved use",
        "vouchers",
        (200, bodies.ReservationConfirmed),
        {
            401: ("UNAUTHORIZED",),
            404: ("VOUCHER_NOT_FOUND", "RESERVATION_NOT_FOUND"),
            409: ("RESERVATION_EXPIRED", "RESERVATION_FAILED", "RESERVATION_PROCESSING"),
            **_UNAVAILABLE,
        },
        auth="service",
        parameters=_RESERVATION,
    ),
    Operation(
        "delete",
        "/vouchers/{code}/reservations/{order_id}",
        "Give a reserved use back",
        "vouchers",
        (200, bodies.ReservationReleased),
        {
            401: ("UNAUTHORIZED",),
            404: ("VOUCHER_NOT_FOUND", "RESERVATION_NOT_FOUND"),
            409: ("ALREADY_CONFIRMED", "RESERVATION_PROCESSING"),
            **_UNAVAILABLE,
        },
        auth="service",
        parameters=_RESERVATION,
    ),
    Operation(
        "post",
        "/admin/vouchers",
        "Create a voucher (a flash voucher is armed at once)",
        "admin",
        (201, bodies.VoucherCreated),
        {400: _BAD_BODY, 401: ("UNAUTHORIZED",), 409: ("VOUCHER_EXISTS",), **_UNAVAILABLE},
        auth="admin",
        body=NewVoucher,
    ),
    Operation(
        "get",
        "/admin/vouchers/{code}",
        "A voucher with its database and Redis counters",
        "admin",
        (200, bodies.VoucherCounters),
        {401: ("UNAUTHORIZED",), 404: ("VOUCHER_NOT_FOUND",), **_UNAVAILABLE},
        auth="admin",
        parameters=_CODE,
    ),
    Operation(
        "post",
        "/admin/vouchers/{code}/arm",
        "Load a flash voucher's uses into Redis again",
        "admin",
        (200, bodies.VoucherArmed),
        {
            401: ("UNAUTHORIZED",),
            404: ("VOUCHER_NOT_FOUND",),
            409: ("NOT_READY_TO_ARM",),
            **_UNAVAILABLE,
        },
        auth="admin",
        parameters=_CODE,
    ),
)

# Which refusals also name when to try again (gateway/errors.py: the class line's retry_after,
# or the raise site's).
_RETRY_AFTER_ALWAYS = frozenset({429, 503})
_RETRY_AFTER_SOMETIMES = frozenset({409})  # ORDER_PROCESSING, RESERVATION_PROCESSING


def _types() -> list[type]:
    found: list[type] = []
    for op in OPERATIONS:
        for t in (op.body, op.ok[1]):
            if t is not None and t not in found:
                found.append(t)
    return [*found, bodies.Error]


def _ref(t: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{t.__name__}"}


def _portable(schema: Any) -> Any:
    """msgspec's schemas with every pattern made ECMA 262 (see _ecma)."""
    if isinstance(schema, dict):
        return {k: _ecma(v) if k == "pattern" else _portable(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_portable(v) for v in schema]
    return schema


def _error(status: int, codes: tuple[str, ...]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": " / ".join(codes),
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [_ref(bodies.Error)],
                    "properties": {"error": {"enum": list(codes)}},
                }
            }
        },
    }
    if status in _RETRY_AFTER_ALWAYS | _RETRY_AFTER_SOMETIMES:
        answer["headers"] = {
            "Retry-After": {
                "$ref": "#/components/headers/RetryAfter"
                if status in _RETRY_AFTER_ALWAYS
                else "#/components/headers/RetryAfterSometimes"
            }
        }
    return answer


def _success(op: Operation) -> dict[str, Any]:
    status, body = op.ok
    schema: dict[str, Any] = _ref(body) if body is not None else {"type": "object"}
    if op.media != "application/json":
        schema = {"type": "string"}
    return {
        "description": body.__name__ if body is not None else op.summary,
        "content": {op.media: {"schema": schema}},
    }


def _merged(*tables: Errors) -> Errors:
    merged: Errors = {}
    for table in tables:
        for status, codes in table.items():
            merged[status] = (*merged.get(status, ()), *codes)
    return merged


def _operation(op: Operation) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "operationId": f"{op.method}_{re.sub(r'[^a-z0-9]+', '_', op.path.lower()).strip('_')}",
        "summary": op.summary,
        "tags": [op.tag],
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in op.parameters.items()
    ]
    parameters += [
        {"name": name, "in": "header", "required": True, "description": use, "schema": _TEXT}
        for name, use in op.headers.items()
    ]
    if parameters:
        spec["parameters"] = parameters
    if op.body is not None:
        spec["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(op.body)}},
        }
    if op.auth is not None:
        spec["security"] = [{op.auth: []}]
    responses = {str(op.ok[0]): _success(op)}
    shed = {} if ungated(op.path) else _SHED
    # An address past its burst of wrong tokens (gateway/requests.py require_bearer).
    guessed = _LIMITED if op.auth in _BEARER_LIMITED else {}
    errors = _merged(op.errors, shed, guessed, _SLOW_BODY if op.body is not None else {})
    responses |= {str(s): _error(s, codes) for s, codes in sorted(errors.items())}
    spec["responses"] = responses
    return spec


def document() -> dict[str, Any]:
    _, schemas = msgspec.json.schema_components(
        _types(), ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    retry = {"type": "integer", "minimum": 0}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Flash-sale purchase gateway",
            "version": VERSION,
            "description": 'Every refusal is a JSON body {"error": CODE, ...}; the codes each '
            "route can answer are listed with its status codes.",
        },
        "paths": paths,
        "components": {
            "schemas": _portable(dict(sorted(schemas.items()))),
            "securitySchemes": _SECURITY,
            "headers": {
                "RetryAfter": {"required": True, "schema": retry},
                "RetryAfterSometimes": {"schema": retry},
            },
        },
    }


DOCUMENT: bytes = msgspec.json.format(msgspec.json.encode(document()), indent=2) + b"\n"


async def serve(request: Request) -> Response:
    return Response(DOCUMENT, media_type="application/json")


if __name__ == "__main__":
    sys.stdout.buffer.write(DOCUMENT)
