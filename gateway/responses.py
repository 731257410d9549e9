"""JSON responses, encoded with msgspec; the answers of the hot path are encoded once."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from gateway.errors import ApiError, SoldOut

encode = msgspec.json.Encoder().encode

JSON = b"application/json"
SOLD_OUT_BODY = encode(SoldOut().body())
SOLD_OUT_HEADERS = [(b"content-type", JSON), (b"content-length", str(len(SOLD_OUT_BODY)).encode())]


def raw_headers(body: bytes, retry_after: int | None = None) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return headers


def render(error: ApiError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The one mapping from an ApiError to (status, headers, body)."""
    body = encode(error.body())
    return error.status, raw_headers(body, error.retry_after), body


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(encode(payload), status_code=status, media_type="application/json")


def error_response(error: ApiError) -> Response:
    status, headers, body = render(error)
    response = Response(body, status_code=status, media_type="application/json")
    if error.retry_after is not None:
        response.headers["retry-after"] = str(error.retry_after)
    return response
