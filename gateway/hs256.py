"""A fast path for the common token: HS256 with the standard header and plain claims.

PyJWT spends ~30-250 µs a token (generic header parsing, key preparation, per-character base64
checks); in a spike every buyer's first request pays it. This path accepts only a strict subset
of what PyJWT accepts — the header segment byte-equal to one of PyJWT's own HS256 headers, a
valid HMAC-SHA256 (compared in constant time), claims limited to sub/exp/iat/nbf/jti/aud/iss
with the right types, each judged by PyJWT's own rule — and answers ``None`` for anything else,
which then goes to PyJWT. So it never accepts a token PyJWT would refuse, and it refuses
(``Rejected``) only what PyJWT refuses too: tests/gateway/test_auth.py checks the two agree.

Tokens reach it already checked canonical by gateway/auth.py, so the lenient base64 decoding
below (``urlsafe_b64decode``'s own steps) decodes exactly the bytes PyJWT decodes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

import msgspec
from msgspec import UNSET, UnsetType

# PyJWT's and most issuers' serialisations of {"alg":"HS256","typ":"JWT"}, in either order.
_HEADERS = frozenset(
    base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    for raw in (
        b'{"alg":"HS256","typ":"JWT"}',
        b'{"typ":"JWT","alg":"HS256"}',
        b'{"alg": "HS256", "typ": "JWT"}',
        b'{"typ": "JWT", "alg": "HS256"}',
    )
)
# A payload that is not base64 of our claims, or whose numbers int() refuses (inf, nan).
_CLAIM_ERRORS = (binascii.Error, msgspec.MsgspecError, OverflowError, ValueError)


# UNSET, not None: PyJWT refuses ``"iat": null`` (and nbf, jti), so null must not decode here.
# For aud and iss it treats null as absent, and so does _claims_match.
class _Claims(msgspec.Struct, forbid_unknown_fields=True):
    sub: str
    exp: int | float
    iat: int | float | UnsetType = UNSET
    nbf: int | float | UnsetType = UNSET
    jti: str | UnsetType = UNSET
    aud: str | list[str] | None = None
    iss: str | None = None


_decode_claims = msgspec.json.Decoder(_Claims).decode


class Rejected(Exception):
    """A token in the fast path's own format that PyJWT refuses too: a wrong signature, or
    expired. Not an ApiError: this module knows no HTTP; the verifier (auth.py) answers 401."""


_URLSAFE = bytes.maketrans(b"-_", b"+/")
_BLOCK = 64  # SHA-256's block size, for the HMAC pads


def _b64decode(segment: str) -> bytes:
    """``base64.urlsafe_b64decode`` with the padding added, without its two Python-level
    wrappers (1.7 → 0.3 µs a segment): the same ASCII check (``UnicodeEncodeError`` is a
    ValueError, as its refusal is), translation and lenient decoding."""
    padded = segment.encode("ascii").translate(_URLSAFE) + b"=" * (-len(segment) % 4)
    return binascii.a2b_base64(padded)


def hmac_pads(secret: bytes) -> tuple[hashlib._Hash, hashlib._Hash]:
    """HMAC-SHA256's inner and outer hashes with the key's pads absorbed (RFC 2104): a token's
    MAC is then two ``copy()``s and two updates (1.2 µs; ``hmac.HMAC.copy`` 3.7, ``hmac.digest``
    12.5, one core of this machine)."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    key = key.ljust(_BLOCK, b"\0")
    return (
        hashlib.sha256(key.translate(hmac.trans_36)),
        hashlib.sha256(key.translate(hmac.trans_5C)),
    )


def buyer_id(sub: object) -> int | None:
    """A ``sub`` that names a buyer: 1-18 ASCII digits (``"٤٢".isdigit()`` is true too)."""
    if isinstance(sub, str) and 0 < len(sub) <= 18 and sub.isascii() and sub.isdigit():
        return int(sub)
    return None


class HS256Fast:
    def __init__(self, secret: str, leeway_s: float, audience: str = "", issuer: str = "") -> None:
        self._inner, self._outer = hmac_pads(secret.encode())
        self._leeway = leeway_s
        self._audience = audience
        self._issuer = issuer

    def verify(self, token: str, now: float) -> tuple[int, int] | None:
        """(user id, exp) for a token this path fully understands, else None (ask PyJWT).

        Raises Rejected for a well-formed HS256 token with a wrong signature or past its exp.
        """
        header, dot, rest = token.partition(".")
        if not dot or header not in _HEADERS:
            return None
        payload, dot, signature = rest.partition(".")
        if not dot or "=" in signature or "." in signature:
            return None
        inner = self._inner.copy()  # the key's pads are computed once, not per token
        inner.update(token[: len(token) - len(signature) - 1].encode())  # header.payload
        outer = self._outer.copy()
        outer.update(inner.digest())
        try:
            given = _b64decode(signature)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(outer.digest(), given):
            raise Rejected()
        try:
            claims = _decode_claims(_b64decode(payload))
            exp = int(claims.exp)  # PyJWT's rule: int(), so 1.9 counts as 1
            iat = None if claims.iat is UNSET else int(claims.iat)
            nbf = None if claims.nbf is UNSET else int(claims.nbf)
        except _CLAIM_ERRORS:
            return None
        if exp <= now - self._leeway:
            raise Rejected()  # PyJWT, whose clock reads later than ours, refuses it too
        if (iat is not None and iat > now + self._leeway) or (
            nbf is not None and nbf > now + self._leeway
        ):
            return None  # not yet valid: near the boundary PyJWT's later clock may differ
        if (claims.aud or self._audience or self._issuer) and not self._claims_match(claims):
            return None
        user = buyer_id(claims.sub)
        return None if user is None else (user, exp)

    def _claims_match(self, claims: _Claims) -> bool:
        """``aud`` and ``iss`` as PyJWT judges them (non-strict audience)."""
        aud = claims.aud
        if not self._audience:
            if aud:  # a token for an audience, and this gateway names none
                return False
        elif not aud or self._audience not in ([aud] if isinstance(aud, str) else aud):
            return False
        return not self._issuer or claims.iss == self._issuer
