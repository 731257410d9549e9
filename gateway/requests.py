"""What the admin and service endpoints share: bearer-token checks and JSON body decoding."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import TypeVar

import msgspec
from starlette.requests import Request

from gateway.errors import BadRequest, Unauthorized
from gateway.services import Services

T = TypeVar("T")


def require_bearer(request: Request, token: str) -> Services:
    """The process's services, once the request carries ``Authorization: Bearer <token>``."""
    s: Services = request.app.state.services
    header = request.headers.get("authorization", "")
    if not hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        raise Unauthorized()
    return s


def admin(request: Request) -> Services:
    services: Services = request.app.state.services
    return require_bearer(request, services.cfg.admin_token)


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
