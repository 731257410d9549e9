"""Who is asking: the client address the per-IP limits count by.

The TCP peer, unless the peer is a configured trusted proxy (``FLASHSALE_TRUSTED_PROXIES``,
CIDRs): then ``X-Forwarded-For`` is read from the right, each trusted hop skipped, and the first
address a trusted hop did not write is the client. A client that sends ``X-Forwarded-For``
itself is not a trusted peer, so its header is never read; the left part of a forwarded header
(what the client wrote before the first proxy) is never reached while a proxy appended after it.

IPv6 clients are counted by their /64, the block one host is usually given: one host cannot
take a fresh bucket per address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
UNKNOWN = "-"
_PEER_CACHE_MAX = 4096  # trust verdicts remembered per peer address (bounded: peers are many)


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (``10.0.0.0/8``, ``::1``) as networks; a bad one fails start-up, naming the setting."""
    try:
        return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip())
    except ValueError as exc:
        raise SystemExit(f"invalid FLASHSALE_TRUSTED_PROXIES: {exc}") from None


def parse_address(text: str) -> Address | None:
    """An address as proxies write it: ``1.2.3.4``, ``1.2.3.4:80``, ``::1``, ``[::1]:80``; an
    IPv4-mapped IPv6 address as its IPv4 address."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # A dual-stack listener reports an IPv4 peer as ::ffff:a.b.c.d: the same host, which the
    # IPv4 CIDRs of the trusted proxies must match.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def bucket_key(address: Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ClientAddress:
    """``of(scope)``: the client's bucket key. With no trusted proxies, the peer's address as
    the server gave it (IPv4: no parsing at all)."""

    def __init__(self, trusted: Sequence[str]) -> None:
        self.trusted = parse_networks(trusted)
        self._peer_trusted: dict[str, bool] = {}

    def of(self, scope: Mapping[str, Any]) -> str:
        client = scope.get("client")
        peer: str = client[0] if client else UNKNOWN
        if self.trusted and self._is_trusted_peer(peer):
            return self._forwarded(scope["headers"], peer)
        return peer if ":" not in peer else _key_of(peer)

    def trusts_peer(self, scope: Mapping[str, Any]) -> bool:
        """Is the TCP peer a trusted proxy? (Its verdict cached: no address parsing per call.)"""
        client = scope.get("client")
        return bool(self.trusted) and client is not None and self._is_trusted_peer(client[0])

    def is_trusted(self, address: Address) -> bool:
        return any(address in network for network in self.trusted)

    def _is_trusted_peer(self, peer: str) -> bool:
        verdict = self._peer_trusted.get(peer)
        if verdict is None:
            address = parse_address(peer)
            verdict = address is not None and self.is_trusted(address)
            if len(self._peer_trusted) >= _PEER_CACHE_MAX:
                self._peer_trusted.clear()
            self._peer_trusted[peer] = verdict
        return verdict

    def _forwarded(self, headers: Iterable[tuple[bytes, bytes]], peer: str) -> str:
        hops: list[str] = []
        for name, value in headers:
            if name == b"x-forwarded-for":  # several headers read as one list, in order
                hops += value.decode("latin-1").split(",")
        nearest = peer  # the closest hop known to be honest
        for hop in reversed(hops):
            address = parse_address(hop)
            if address is None:
                break  # a trusted proxy never writes garbage: count by the hop that passed it
            if not self.is_trusted(address):
                return bucket_key(address)
            nearest = str(address)
        return _key_of(nearest)


def _key_of(text: str) -> str:
    address = parse_address(text)
    return bucket_key(address) if address is not None else text
