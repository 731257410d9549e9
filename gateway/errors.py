"""The gateway's errors: a small tree, each knowing its HTTP status and stable JSON code.

    ApiError
    ├── BadRequest          400 INVALID_REQUEST
    ├── Unauthorized        401 UNAUTHORIZED / INVALID_TICKET
    ├── SaleNotOpen         403 SALE_NOT_OPEN
    ├── NotAdmitted         403 ADMISSION_REQUIRED (the sale's waiting room is on)
    │                           / PROOF_OF_WORK_REQUIRED (+ difficulty)
    ├── NotFound            404 ITEM_NOT_FOUND / ORDER_NOT_FOUND / SALE_NOT_FOUND / NOT_FOUND
    │                           / VOUCHER_NOT_FOUND / RESERVATION_NOT_FOUND
    ├── Conflict            409 ALREADY_PURCHASED / ORDER_EXPIRED / ORDER_FAILED / ORDER_PROCESSING
    │                           / NOT_READY_TO_ARM / OUT_OF_STOCK / ALREADY_USED / ORDER_ID_CONFLICT
    │                           / RESERVATION_EXPIRED / RESERVATION_FAILED / RESERVATION_PROCESSING
    │                           / ALREADY_CONFIRMED / VOUCHER_EXISTS
    ├── SoldOut             410 SOLD_OUT
    ├── NotEligible         422 NOT_ELIGIBLE (+ reason: EXPIRED / NOT_STARTED / BELOW_MIN_ORDER)
    ├── RateLimited         429 RATE_LIMITED (+ Retry-After)
    └── Unavailable         503 UNAVAILABLE (+ Retry-After)

``render`` (gateway/responses.py) is the one place that turns them into responses.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApiError(Exception):
    """Each subclass names its status and default code (and Retry-After) in its class line."""

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "INTERNAL"
    default_retry_after: ClassVar[int | None] = None

    def __init_subclass__(
        cls, *, status: int, code: str, retry_after: int | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.status = status
        cls.default_code = code
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


class BadRequest(ApiError, status=400, code="INVALID_REQUEST"): ...


class Unauthorized(ApiError, status=401, code="UNAUTHORIZED"): ...


class SaleNotOpen(ApiError, status=403, code="SALE_NOT_OPEN"): ...


class NotAdmitted(ApiError, status=403, code="ADMISSION_REQUIRED"): ...


class NotFound(ApiError, status=404, code="NOT_FOUND"): ...


class Conflict(ApiError, status=409, code="CONFLICT"): ...


class SoldOut(ApiError, status=410, code="SOLD_OUT"): ...


class NotEligible(ApiError, status=422, code="NOT_ELIGIBLE"): ...


class RateLimited(ApiError, status=429, code="RATE_LIMITED"): ...


class Unavailable(ApiError, status=503, code="UNAVAILABLE", retry_after=1): ...
