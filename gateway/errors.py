"""The gateway's errors: a small tree, each knowing its HTTP status and stable JSON code.

    ApiError
    ├── BadRequest          400 INVALID_REQUEST
    ├── Unauthorized        401 UNAUTHORIZED
    ├── SaleNotOpen         403 SALE_NOT_OPEN
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
    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "INTERNAL"

    def __init__(
        self, code: str | None = None, *, retry_after: int | None = None, **extra: Any
    ) -> None:
        self.code = code or self.default_code
        self.retry_after = retry_after
        self.extra = extra
        super().__init__(self.code)

    def body(self) -> dict[str, Any]:
        return {"error": self.code, **self.extra}


class BadRequest(ApiError):
    status = 400
    default_code = "INVALID_REQUEST"


class Unauthorized(ApiError):
    status = 401
    default_code = "UNAUTHORIZED"


class SaleNotOpen(ApiError):
    status = 403
    default_code = "SALE_NOT_OPEN"


class NotFound(ApiError):
    status = 404
    default_code = "NOT_FOUND"


class Conflict(ApiError):
    status = 409
    default_code = "CONFLICT"


class SoldOut(ApiError):
    status = 410
    default_code = "SOLD_OUT"


class NotEligible(ApiError):
    status = 422
    default_code = "NOT_ELIGIBLE"


class RateLimited(ApiError):
    status = 429
    default_code = "RATE_LIMITED"


class Unavailable(ApiError):
    status = 503
    default_code = "UNAVAILABLE"

    def __init__(
        self, code: str | None = None, *, retry_after: int | None = 1, **extra: Any
    ) -> None:
        super().__init__(code, retry_after=retry_after, **extra)
