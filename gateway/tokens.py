"""The one spelling of a compact JWS that the gateway accepts.

Python's base64 decoding (PyJWT's too) skips characters outside the alphabet, takes padding,
and ignores the bits past the last byte, so one signed token had unlimited accepted spellings,
each a new cache entry. Here a token is three unpadded base64url segments, each exactly what
encoding its bytes gives back: a token that is not is refused before anything decodes it.
"""

from __future__ import annotations

import re

# A signed buyer token is ~150-250 characters (RS256 ~550): far more is not a token of ours.
MAX_TOKEN_CHARS = 4096

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# The last character of a segment whose length leaves 2 (or 3) characters after its last full
# quantum encodes 4 (or 2) bits past the data: canonical only when those bits are zero.
_LAST_OF = {
    2: frozenset(_ALPHABET[::16]),
    3: frozenset(_ALPHABET[::4]),
}


def canonical(token: str) -> bool:
    """Is ``token`` three base64url segments, each its bytes' only encoding (RFC 7515 §2: no
    padding, no characters outside the alphabet, no stray bits)?"""
    if _COMPACT.fullmatch(token) is None:
        return False
    for segment in token.split("."):
        rest = len(segment) % 4
        if rest == 1 or (rest and segment[-1] not in _LAST_OF[rest]):
            return False
    return True
