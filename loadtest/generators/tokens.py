"""Buyer tokens for load: many distinct buyers, each signed exactly as ``gateway.auth.sign_token``
signs (HS256, claims ``sub``, ``exp``, ``iat`` in that order), but ~30x faster, so a run can use
hundreds of thousands of fresh buyers. ``check`` proves the equivalence before a run uses them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path

from gateway.auth import TokenVerifier, sign_token
from kernel.settings import Settings

_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def signed(
    cfg: Settings, user_ids: range, ttl_s: int = 7200, now: int | None = None
) -> Iterator[bytes]:
    """One HS256 JWT per user id (``sub`` = the id), all with the same ``iat`` and ``exp``."""
    key = cfg.jwt_secret.encode()
    iat = int(time.time()) if now is None else now
    claims_tail = b'","exp":%d,"iat":%d}' % (iat + ttl_s, iat)
    for user_id in user_ids:
        signing_input = _HEADER + b"." + _b64(b'{"sub":"%d' % user_id + claims_tail)
        signature = hmac.new(key, signing_input, hashlib.sha256).digest()
        yield signing_input + b"." + _b64(signature)


def check(cfg: Settings) -> None:
    """Fail unless our tokens are byte-for-byte ``sign_token``'s and the gateway accepts them."""
    for _ in range(3):
        now = int(time.time())
        reference = sign_token(cfg, 123456789, ttl_seconds=7200)
        ours = next(signed(cfg, range(123456789, 123456790), now=now)).decode()
        if int(time.time()) == now:
            break
    if ours != reference:
        raise RuntimeError("loadtest tokens differ from gateway.auth.sign_token")
    if TokenVerifier(cfg).user_id(f"Bearer {ours}") != 123456789:
        raise RuntimeError("the gateway's verifier refuses loadtest tokens")


def write(cfg: Settings, path: Path, user_ids: range) -> Path:
    """Write one token per line for these buyers."""
    with path.open("wb") as out:
        out.write(b"\n".join(signed(cfg, user_ids)))
        out.write(b"\n")
    return path


class BuyerIds:
    """Hands out disjoint ranges of buyer ids, fresh for every run of every invocation: ids
    start at ``unix seconds * 10**7``, so invocations a second apart never meet (given fewer
    than 10M buyers each)."""

    def __init__(self) -> None:
        self._next = int(time.time()) * 10**7

    def take(self, count: int) -> range:
        first = self._next
        self._next += count
        return range(first, first + count)
