"""The gateway's errors: a small tree, each knowing its HTTP status and the stable JSON codes it
may carry (the first is its default). Every code the API answers is here.

    ApiError
    ├── BadRequest          400 INVALID_REQUEST (+ detail) / BODY_TOO_LARGE
    ├── Unauthorized        401 UNAUTHORIZED / INVALID_TICKET
    ├── SaleNotOpen         403 SALE_NOT_OPEN
    ├── NotAdmitted         403 ADMISSION_REQUIRED (the sale's waiting room is on)
    │                           / PROOF_OF_WORK_REQUIRED (+ difficulty)
    │                           / TICKET_NOT_YOURS (a poll with another buyer's ticket)
    ├── NotFound            404 NOT_FOUND (no such route) / ITEM_NOT_FOUND / ORDER_NOT_FOUND
    │                           / SALE_NOT_FOUND / VOUCHER_NOT_FOUND / RESERVATION_NOT_FOUND
    ├── MethodNotAllowed    405 METHOD_NOT_ALLOWED (a route, but not this method)
    ├── RequestTimeout      408 REQUEST_TIMEOUT (the body did not arrive in time)
    ├── Conflict            409 ALREADY_PURCHASED (+ orderId) / ORDER_PAID / ORDER_PENDING
    │                           / ORDER_EXPIRED / ORDER_FAILED / ORDER_PROCESSING
    │                           / NOT_READY_TO_ARM / SALE_LIVE (+ detail) / OUT_OF_STOCK
    │                           / ALREADY_USED / ORDER_ID_CONFLICT / RESERVATION_EXPIRED
    │                           / RESERVATION_FAILED / RESERVATION_PROCESSING / ALREADY_CONFIRMED
    │                           / VOUCHER_EXISTS / NO_WAITING_ROOM (the sale has none to control)
    ├── SoldOut             410 SOLD_OUT
    ├── NotEligible         422 NOT_ELIGIBLE (+ reason: EXPIRED / NOT_STARTED / BELOW_MIN_ORDER)
    ├── RateLimited         429 RATE_LIMITED (+ Retry-After)
    ├── Internal            500 INTERNAL (a fault of ours, logged)
    └── Unavailable         503 UNAVAILABLE / NOT_READY (/readyz) / VOUCHER_NOT_ARMED
        │                       (+ Retry-After)
        └── Overloaded      503 OVERLOADED (+ Retry-After: admission refused it before any work)

``render`` (gateway/responses.py) is the one place that turns them into responses;
gateway/exception_map.py maps what is not an ApiError (Starlette's 404 and 405, a failed
dependency, a fault) onto this tree.

Outside the tree, on purpose: the signals between the gateway's own modules, each caught by
name where it matters and answered with one of the above — catalog.CatalogUnavailable (503),
hs256.Rejected (401), producer.NeverSent and producer.OutcomeUnknown (503; the unit released or
kept, so they share no base).
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApiError(Exception):
    """Each subclass names its status, default code, the other codes it may carry (``also``)
    and its Retry-After in its class line."""

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "INTERNAL"
    codes: ClassVar[tuple[str, ...]] = ("INTERNAL",)
    default_retry_after: ClassVar[int | None] = None

    def __init_subclass__(
        cls,
        *,
        status: int,
        code: str,
        also: tuple[str, ...] = (),
        retry_after: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.status = status
        cls.default_code = code
        cls.codes = (code, *also)
        cls.default_retry_after = retry_after

    def __init__(
        self, code: str | None = None, *, retry_after: int | None = None, **extra: Any
    ) -> None:
        self.code = code or self.default_code
        self.retry_after = self.default_retry_after if retry_after is None else retry_after
        self.extra = extra
        super().__init__(self.code)

    def body(self) -> dict[str, Any]:
        return {"error": self.code, **self.extra}


class BadRequest(ApiError, status=400, code="INVALID_REQUEST", also=("BODY_TOO_LARGE",)): ...


class Unauthorized(ApiError, status=401, code="UNAUTHORIZED", also=("INVALID_TICKET",)): ...


class SaleNotOpen(ApiError, status=403, code="SALE_NOT_OPEN"): ...


class NotAdmitted(
    ApiError,
    status=403,
    code="ADMISSION_REQUIRED",
    also=("PROOF_OF_WORK_REQUIRED", "TICKET_NOT_YOURS"),
): ...


class NotFound(
    ApiError,
    status=404,
    code="NOT_FOUND",
    also=(
        "ITEM_NOT_FOUND",
        "ORDER_NOT_FOUND",
        "SALE_NOT_FOUND",
        "VOUCHER_NOT_FOUND",
        "RESERVATION_NOT_FOUND",
    ),
): ...


class MethodNotAllowed(ApiError, status=405, code="METHOD_NOT_ALLOWED"): ...


class RequestTimeout(ApiError, status=408, code="REQUEST_TIMEOUT"): ...


class Conflict(
    ApiError,
    status=409,
    code="ALREADY_PURCHASED",
    also=(
        "ORDER_PAID",  # cancel answers ORDER_<status> (gateway/orders.py)
        "ORDER_PENDING",
        "ORDER_EXPIRED",
        "ORDER_FAILED",
        "ORDER_PROCESSING",
        "NOT_READY_TO_ARM",  # domain/errors.py's NotReady codes
        "SALE_LIVE",
        "OUT_OF_STOCK",
        "ALREADY_USED",
        "ORDER_ID_CONFLICT",
        "RESERVATION_EXPIRED",
        "RESERVATION_FAILED",
        "RESERVATION_PROCESSING",
        "ALREADY_CONFIRMED",
        "VOUCHER_EXISTS",
        "NO_WAITING_ROOM",  # gateway/room_admin.py: a sale created without one
    ),
): ...


class SoldOut(ApiError, status=410, code="SOLD_OUT"): ...


class NotEligible(ApiError, status=422, code="NOT_ELIGIBLE"): ...


class RateLimited(ApiError, status=429, code="RATE_LIMITED"): ...


class Internal(ApiError, status=500, code="INTERNAL"): ...


class Unavailable(
    ApiError,
    status=503,
    code="UNAVAILABLE",
    also=("NOT_READY", "VOUCHER_NOT_ARMED"),
    retry_after=1,
): ...


class Overloaded(Unavailable, status=503, code="OVERLOADED", retry_after=1): ...
