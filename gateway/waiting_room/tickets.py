"""Queue tickets and admissions: HMAC-signed text, so any gateway verifies one without a lookup
(and a restarted gateway still accepts what another issued).

    ticket    ``<buyer>.<sale>.<place>.<issued_ms>.<mac>``  place 0: joined before the start,
                                                           not placed yet
    admission ``<buyer>.<sale>.<place>.<expires_s>.<mac>``

Each MAC is domain-separated ("t" or "a"), so a ticket is never accepted as an admission.
"""

from __future__ import annotations

import base64
import hmac
from typing import NamedTuple

from gateway.hs256 import hmac_pads

_MAC_CHARS = 22  # 128 bits of HMAC-SHA256, base64url
_MAX_LEN = 160  # before hashing anything a client sent
_KNOWN_TICKETS = 500_000  # verified tickets remembered (~100 MB at most), then forgotten


class Ticket(NamedTuple):
    buyer: int
    sale: int
    place: int
    issued_ms: int


def room_key(waiting_room_secret: str, admin_token: str) -> str:
    """The signing key: the room's own secret, else one derived from the admin token (a
    domain-separated HMAC, so a ticket's MAC never reveals or equals anything of the token)."""
    if waiting_room_secret:
        return waiting_room_secret
    return hmac.digest(admin_token.encode(), b"flashsale waiting room v1", "sha256").hex()


class Signer:
    def __init__(self, secret: str) -> None:
        inner, self._outer = hmac_pads(secret.encode())
        # The key's pads and each domain's prefix hashed once (gateway/hs256.py's way): a MAC
        # is then two copy()s and two updates, not a whole hmac.digest (a purchase checks one).
        self._inner = {domain: inner.copy() for domain in (b"t", b"a")}
        for domain, hashed in self._inner.items():
            hashed.update(domain + b"|")
        self._verified_tickets: dict[str, Ticket] = {}

    def _mac(self, domain: bytes, payload: str) -> str:
        inner = self._inner[domain].copy()
        inner.update(payload.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return base64.urlsafe_b64encode(outer.digest()).decode()[:_MAC_CHARS]

    def ticket(self, t: Ticket) -> str:
        payload = f"{t.buyer}.{t.sale}.{t.place}.{t.issued_ms}"
        return f"{payload}.{self._mac(b't', payload)}"

    def read_ticket(self, text: str | None) -> Ticket | None:
        """The ticket, or None when it is malformed, forged or altered. Each waiting buyer
        polls the same text again and again: verified ones are remembered (bounded), so a
        repeat poll costs a dict lookup instead of a MAC."""
        if text is None:
            return None
        known = self._verified_tickets.get(text)
        if known is not None:
            return known
        fields = self._verified(b"t", text, 5)
        if fields is None:
            return None
        if len(self._verified_tickets) >= _KNOWN_TICKETS:
            self._verified_tickets.clear()
        ticket = self._verified_tickets[text] = Ticket(*fields)
        return ticket

    def admission(self, buyer: int, sale: int, place: int, expires_s: int) -> str:
        payload = f"{buyer}.{sale}.{place}.{expires_s}"
        return f"{payload}.{self._mac(b'a', payload)}"

    def admits(self, text: str | None, buyer: int, sale: int, now_s: float, spent: int) -> bool:
        """Does ``text`` admit this buyer to this sale now? Not once its place is ``spent``
        (admitted before a sell-out, or re-offered and left unused: frontier.py)."""
        fields = self._verified(b"a", text, 5)
        if fields is None:
            return False
        who, what, place, expires = fields
        return who == buyer and what == sale and place > spent and now_s < expires

    def _verified(self, domain: bytes, text: str | None, parts: int) -> list[int] | None:
        if not text or len(text) > _MAX_LEN or not text.isascii():
            return None
        payload, _, mac = text.rpartition(".")
        fields = payload.split(".")
        if len(fields) != parts - 1 or not all(f.isdigit() and len(f) <= 19 for f in fields):
            return None
        if not hmac.compare_digest(mac.encode(), self._mac(domain, payload).encode()):
            return None
        return [int(f) for f in fields]
