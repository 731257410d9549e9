"""The HS256 fast path never accepts what PyJWT refuses, and agrees with it on what it accepts."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest

from gateway.auth import TokenVerifier
from gateway.errors import Unauthorized
from gateway.hs256 import HS256Fast, Rejected
from kernel.settings import Settings


def _b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def _vectors(secret: str) -> dict[str, str]:
    now = int(time.time())
    good = {"sub": "42", "exp": now + 600, "iat": now}
    other = "y" * 64
    return {
        "valid": jwt.encode(good, secret, algorithm="HS256"),
        "valid with nbf and jti": jwt.encode(
            {**good, "nbf": now - 1, "jti": "j"}, secret, algorithm="HS256"
        ),
        "expired": jwt.encode({**good, "exp": now - 60}, secret, algorithm="HS256"),
        "not yet valid": jwt.encode({**good, "nbf": now + 600}, secret, algorithm="HS256"),
        "wrong key": jwt.encode(good, other, algorithm="HS256"),
        "HS512": jwt.encode(good, secret, algorithm="HS512"),
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(good)}.",
        "audience": jwt.encode({**good, "aud": "x"}, secret, algorithm="HS256"),
        "no sub": jwt.encode({"exp": now + 600}, secret, algorithm="HS256"),
        "no exp": jwt.encode({"sub": "42"}, secret, algorithm="HS256"),
        "string exp": jwt.encode({"sub": "42", "exp": str(now + 600)}, secret, algorithm="HS256"),
        "non-digit sub": jwt.encode({**good, "sub": "4a"}, secret, algorithm="HS256"),
        "tampered payload": ".".join(
            [
                jwt.encode(good, secret, algorithm="HS256").split(".")[0],
                _b64({**good, "sub": "1"}),
                jwt.encode(good, secret, algorithm="HS256").split(".")[2],
            ]
        ),
        "garbage": "a.b.c",
        "two parts": "a.b",
    }


@pytest.mark.parametrize("name", list(_vectors("s" * 64)))
def test_fast_path_accepts_only_what_pyjwt_accepts(name: str) -> None:
    secret = "s" * 64
    token = _vectors(secret)[name]
    try:
        claims = jwt.decode(
            token, secret, algorithms=["HS256"], options={"require": ["exp", "sub"]}, leeway=5
        )
        pyjwt_user: int | None = int(claims["sub"]) if str(claims["sub"]).isdigit() else None
    except jwt.PyJWTError:
        pyjwt_user = None
    try:
        fast = HS256Fast(secret, 5).verify(token, time.time())
    except Rejected:
        fast = None
        assert pyjwt_user is None
    if fast is not None:
        assert fast[0] == pyjwt_user
    verifier = TokenVerifier(Settings(jwt_secret=secret))
    try:
        assert verifier.user_id(f"Bearer {token}") == pyjwt_user
    except Unauthorized:
        assert pyjwt_user is None
