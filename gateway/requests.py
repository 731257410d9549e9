"""What the endpoints share in reading a request: the process's services, bearer-token checks,
path parameters and JSON bodies."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import TypeVar

import msgspec
from starlette.requests import Request

from domain.vouchers import valid_code
from gateway.errors import BadRequest, NotFound, RateLimited, Unauthorized
from gateway.ratelimit import retry_after_seconds
from gateway.services import Services

T = TypeVar("T")


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def require_bearer(request: Request, token: str) -> Services:
    """The process's services, once the request carries ``Authorization: Bearer <token>``.

    Each wrong credential takes one of its client address's failure tokens; an address with
    none left is answered 429 before its credential is compared, so a right guess then tells
    it nothing. A request without credentials guesses nothing and is a plain 401."""
    header = request.headers.get("authorization")
    if header is None:
        raise Unauthorized()
    state = request.app.state
    failures, address = state.limits.auth_failures, state.client_address.of(request.scope)
    now = time.monotonic()
    wait = failures.waiting(address, now)
    if wait:
        raise RateLimited(retry_after=retry_after_seconds(wait))
    if not hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        failures.take(address, now)
        raise Unauthorized()
    return services(request)


def admin(request: Request) -> Services:
    return require_bearer(request, services(request).cfg.admin_token)


def path_param(request: Request, name: str, parse: Callable[[str], T | None], missing: str) -> T:
    """The path parameter ``name``, parsed; one that does not parse names nothing: 404
    ``missing``."""
    value = parse(request.path_params[name])
    if value is None:
        raise NotFound(missing)
    return value


def database_id(text: str) -> int | None:
    """An id as a path segment: digits, no more than a bigint column holds."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 15 else None


def voucher_code(request: Request) -> str:
    """The voucher code of the path; a malformed one names no voucher."""
    return path_param(request, "code", _valid_code, "VOUCHER_NOT_FOUND")


def _valid_code(code: str) -> str | None:
    return code if valid_code(code) else None


async def decode_body(request: Request, decode: Callable[[bytes], T], max_bytes: int) -> T:
    """Decode a JSON body with a msgspec decoder; too large or invalid → 400, never a 500."""
    body = bytearray()
    async for chunk in request.stream():  # stop reading an oversized body early
        body += chunk
        if len(body) > max_bytes:
            raise BadRequest("BODY_TOO_LARGE")
    try:
        return decode(bytes(body))
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
        raise BadRequest(detail=str(exc)) from None
