"""Proof of work on joining a sale's queue (per sale, difficulty 0 = off): the client finds a
nonce whose ``sha256("<saleId>.<buyerId>.<nonce>")`` starts with ``difficulty`` zero bits, so
one client cannot cheaply take thousands of places; checking costs one hash."""

from __future__ import annotations

import hashlib
import itertools

HEADER = "x-queue-proof"
_MAX_NONCE_CHARS = 20


def _zero_bits(digest: bytes) -> int:
    value = int.from_bytes(digest, "big")
    return len(digest) * 8 - value.bit_length()


def _digest(sale: int, buyer: int, nonce: str) -> bytes:
    return hashlib.sha256(f"{sale}.{buyer}.{nonce}".encode()).digest()


def valid(sale: int, buyer: int, nonce: str | None, difficulty: int) -> bool:
    if difficulty <= 0:
        return True
    if not nonce or len(nonce) > _MAX_NONCE_CHARS or not nonce.isascii():
        return False
    return _zero_bits(_digest(sale, buyer, nonce)) >= difficulty


def solve(sale: int, buyer: int, difficulty: int) -> str:
    """A nonce that proves ``difficulty`` (about 2**difficulty hashes): what a client runs."""
    for n in itertools.count():
        if valid(sale, buyer, str(n), difficulty):
            return str(n)
    raise AssertionError("unreachable")
