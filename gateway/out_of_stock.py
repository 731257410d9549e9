"""The local OUT-OF-STOCK flags of flash vouchers."""

from __future__ import annotations

import time

_MAX_FLAGS = 100_000


class OutOfStockFlags:
    """A flash voucher seen with no use left answers 409 OUT_OF_STOCK with no I/O for ``ttl_s``.

    Not broadcast: each instance learns it from its own first loser, and the TTL bounds how
    long a use given back (release, expiry) stays invisible to an instance.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._until: dict[str, float] = {}

    def is_out(self, code: str) -> bool:
        until = self._until.get(code)
        return until is not None and until > time.monotonic()

    def mark(self, code: str) -> None:
        if len(self._until) >= _MAX_FLAGS:
            self._until.clear()
        self._until[code] = time.monotonic() + self.ttl_s

    def clear(self, code: str) -> None:
        self._until.pop(code, None)
