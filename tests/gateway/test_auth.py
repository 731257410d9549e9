"""The HS256 fast path never accepts what PyJWT refuses, and agrees with it on what it accepts.

The reference is PyJWT's verdict (with the verifier's options) plus the buyer rule for ``sub``
(1-18 ASCII digits); for every token the fast path answers a user, refuses (Rejected), or
passes it on (None), and each answer must match the reference."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.auth import TokenVerifier
from gateway.errors import Unauthorized
from gateway.hs256 import HS256Fast, Rejected, buyer_id
from kernel.settings import Settings

SECRET = "s" * 64
LEEWAY = 5


def _b64(obj: object) -> str:
    text = json.dumps(obj, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _signed(claims: dict[str, Any], secret: str = SECRET) -> str:
    """An HS256 token over exactly these claims (PyJWT's encode refuses some, e.g. a non-string
    ``iss``), with PyJWT's own header."""
    signing_input = f"{_b64({'alg': 'HS256', 'typ': 'JWT'})}.{_b64(claims)}"
    mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


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
        "expired within the leeway": jwt.encode(
            {**good, "exp": now - 2}, secret, algorithm="HS256"
        ),
        "float exp just past": jwt.encode({**good, "exp": now - 4.5}, secret, algorithm="HS256"),
        "not yet valid": jwt.encode({**good, "nbf": now + 600}, secret, algorithm="HS256"),
        "iat in the future": jwt.encode({**good, "iat": now + 600}, secret, algorithm="HS256"),
        "iat within the leeway": jwt.encode({**good, "iat": now + 2}, secret, algorithm="HS256"),
        "null iat": jwt.encode({**good, "iat": None}, secret, algorithm="HS256"),
        "null nbf": jwt.encode({**good, "nbf": None}, secret, algorithm="HS256"),
        "null jti": jwt.encode({**good, "jti": None}, secret, algorithm="HS256"),
        "wrong key": jwt.encode(good, other, algorithm="HS256"),
        "HS512": jwt.encode(good, secret, algorithm="HS512"),
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(good)}.",
        "audience": jwt.encode({**good, "aud": "x"}, secret, algorithm="HS256"),
        "empty audience": jwt.encode({**good, "aud": ""}, secret, algorithm="HS256"),
        "issuer": jwt.encode({**good, "iss": "someone"}, secret, algorithm="HS256"),
        "no sub": jwt.encode({"exp": now + 600}, secret, algorithm="HS256"),
        "no exp": jwt.encode({"sub": "42"}, secret, algorithm="HS256"),
        "string exp": jwt.encode({"sub": "42", "exp": str(now + 600)}, secret, algorithm="HS256"),
        "huge exp": jwt.encode({"sub": "42", "exp": 10**30}, secret, algorithm="HS256"),
        "non-digit sub": jwt.encode({**good, "sub": "4a"}, secret, algorithm="HS256"),
        "Arabic-Indic sub": jwt.encode({**good, "sub": "٤٢"}, secret, algorithm="HS256"),
        "fullwidth sub": jwt.encode({**good, "sub": "４２"}, secret, algorithm="HS256"),
        "superscript sub": jwt.encode({**good, "sub": "²"}, secret, algorithm="HS256"),
        "19-digit sub": jwt.encode({**good, "sub": "1" * 19}, secret, algorithm="HS256"),
        "empty sub": jwt.encode({**good, "sub": ""}, secret, algorithm="HS256"),
        "kid header": jwt.encode(good, secret, algorithm="HS256", headers={"kid": "k1"}),
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


def _reference(token: str, secret: str, audience: str = "", issuer: str = "") -> int | None:
    """PyJWT's verdict with the verifier's options, then the buyer rule."""
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=["HS256"],
            options={"require": ["exp", "sub"]},
            audience=audience or None,
            issuer=issuer or None,
            leeway=LEEWAY,
        )
    except jwt.PyJWTError:
        return None
    return buyer_id(claims["sub"])


def _fast(token: str, audience: str = "", issuer: str = "") -> int | None | Rejected:
    try:
        verified = HS256Fast(SECRET, LEEWAY, audience, issuer).verify(token, time.time())
    except Rejected as refused:
        return refused
    return None if verified is None else verified[0]


def _check_agreement(token: str, audience: str = "", issuer: str = "") -> None:
    expected = _reference(token, SECRET, audience, issuer)
    fast = _fast(token, audience, issuer)
    if isinstance(fast, Rejected):
        assert expected is None, "the fast path refused a token PyJWT accepts"
    elif fast is not None:
        assert fast == expected, "the fast path accepted what PyJWT refuses, or another user"
    cfg = Settings(jwt_secret=SECRET, jwt_audience=audience, jwt_issuer=issuer)
    try:
        assert TokenVerifier(cfg).user_id(f"Bearer {token}") == expected
    except Unauthorized:
        assert expected is None


@pytest.mark.parametrize("name", list(_vectors(SECRET)))
def test_fast_path_accepts_only_what_pyjwt_accepts(name: str) -> None:
    _check_agreement(_vectors(SECRET)[name])


@pytest.mark.parametrize("name", list(_vectors(SECRET)))
@pytest.mark.parametrize(("audience", "issuer"), [("shop", ""), ("", "idp"), ("shop", "idp")])
def test_agreement_with_an_audience_and_an_issuer(name: str, audience: str, issuer: str) -> None:
    _check_agreement(_vectors(SECRET)[name], audience, issuer)


@pytest.mark.parametrize(
    "extra",
    [
        {"aud": "shop"},
        {"aud": ["other", "shop"]},
        {"aud": ["other"]},
        {"aud": []},
        {"aud": None},
        {"aud": 7},
        {"iss": "idp"},
        {"iss": "IdP"},
        {"iss": None},
        {"iss": 3},
        {"aud": "shop", "iss": "idp"},
    ],
)
def test_audience_and_issuer_claims_agree(extra: dict[str, Any]) -> None:
    now = int(time.time())
    token = _signed({"sub": "42", "exp": now + 600, "iat": now, **extra})
    for audience, issuer in (("", ""), ("shop", ""), ("", "idp"), ("shop", "idp")):
        _check_agreement(token, audience, issuer)


# Valid claims, each field then left alone, dropped or replaced (values of every JSON type near
# the boundaries the rules draw), so that the random tokens land on both sides of each rule.
def _time_claim(now: int) -> st.SearchStrategy[object]:
    offsets = st.integers(-700, 700)
    return st.one_of(
        offsets.map(lambda d: now + d),
        offsets.map(lambda d: now + d + 0.5),
        st.none(),
        st.booleans(),
        offsets.map(lambda d: str(now + d)),
        st.just(10**30),
    )


_SUBS = st.one_of(
    st.integers(0, 10**19).map(str),
    st.sampled_from(["", "٤٢", "４２", "²", "-1", "+1", " 1", "1 ", "0x1", "1e3"]),
    st.integers(0, 100),
    st.none(),
)
_OTHERS: dict[str, st.SearchStrategy[object]] = {
    "aud": st.sampled_from(["shop", "x", "", ["shop"], ["x", "shop"], [], None, 1]),
    "iss": st.sampled_from(["idp", "x", None, 2]),
    "jti": st.sampled_from(["j", None, 5]),
    "scope": st.just("buy"),
}


@st.composite
def _claims(draw: st.DrawFn) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {"sub": "42", "exp": now + 600, "iat": now}
    fields: dict[str, st.SearchStrategy[object]] = {
        "sub": _SUBS,
        "exp": _time_claim(now),
        "iat": _time_claim(now),
        "nbf": _time_claim(now),
        **_OTHERS,
    }
    for name, values in fields.items():
        change = draw(st.integers(0, 9))
        if change == 0:
            claims.pop(name, None)
        elif change <= 2:
            claims[name] = draw(values)
    return claims


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    claims=_claims(),
    config=st.sampled_from([("", ""), ("shop", ""), ("", "idp"), ("shop", "idp")]),
    secret=st.sampled_from([SECRET] * 9 + ["y" * 64]),
)
def test_random_claims_agree(
    claims: dict[str, object], config: tuple[str, str], secret: str
) -> None:
    _check_agreement(_signed(claims, secret), *config)
