"""What a Starlette route's exception answers: an ApiError renders itself, everything else is
mapped onto the error tree (gateway/errors.py), so no client ever sees a 500 page or an
unlisted code. The raw routes of the front (purchase, room poll) render their own ApiErrors."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import asyncpg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.catalog import CatalogUnavailable
from gateway.errors import ApiError, BadRequest, Internal, MethodNotAllowed, NotFound, Unavailable
from gateway.responses import encode, error_response

log = logging.getLogger(__name__)
Handler = Callable[[Request, Exception], Awaitable[Response]]
# Starlette's own refusals by status; any other is the client's fault, with Starlette's status.
_BY_HTTP_STATUS: dict[int, type[ApiError]] = {404: NotFound, 405: MethodNotAllowed}


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def dependency_error(request: Request, exc: Exception) -> Response:
    """PostgreSQL (or a socket) failed under a non-purchase route: 503, never a 500 page."""
    log.warning("%s %r: %r", request.method, request.url.path, exc)  # %r: the client wrote it
    return error_response(Unavailable())


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %r", request.method, request.url.path)
    return error_response(Internal())


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = _BY_HTTP_STATUS.get(exc.status_code, BadRequest)()
    return Response(
        encode(error.body()), status_code=exc.status_code, media_type="application/json"
    )


EXCEPTION_HANDLERS: dict[type[Exception], Handler] = {
    ApiError: api_error,
    HTTPException: http_error,
    asyncpg.PostgresError: dependency_error,
    asyncpg.InterfaceError: dependency_error,
    OSError: dependency_error,
    CatalogUnavailable: dependency_error,
    Exception: internal_error,
}
