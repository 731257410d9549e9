"""Who the per-address limits count: the TCP peer, unless a trusted proxy says who it spoke to."""

from __future__ import annotations

import pytest

from gateway.client_address import ClientAddress, parse_address

PROXIES = ("10.0.0.0/8", "2001:db8:ffff::/48")


def scope(peer: str | None, *forwarded: str) -> dict[str, object]:
    return {
        "client": (peer, 40000) if peer else None,
        "headers": [(b"x-forwarded-for", value.encode()) for value in forwarded],
    }


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # No proxy in between: the peer, whatever it writes.
        ("203.0.113.9", (), "203.0.113.9"),
        ("203.0.113.9", ("198.51.100.1",), "203.0.113.9"),
        # Through a trusted proxy: the address the proxy appended.
        ("10.1.2.3", ("198.51.100.1",), "198.51.100.1"),
        # What the client wrote before the proxy's entry is never reached.
        ("10.1.2.3", ("6.6.6.6, 7.7.7.7, 198.51.100.1",), "198.51.100.1"),
        # Several trusted hops are skipped; several headers read as one list.
        ("10.1.2.3", ("198.51.100.1, 10.9.9.9",), "198.51.100.1"),
        ("10.1.2.3", ("6.6.6.6", "198.51.100.1, 10.9.9.9"), "198.51.100.1"),
        # Ports and brackets as proxies write them.
        ("10.1.2.3", ("198.51.100.1:5555",), "198.51.100.1"),
        ("10.1.2.3", ("[2001:db8::1]:443",), "2001:db8::/64"),
        # A trusted proxy with no header, or only trusted hops: the nearest one is the client.
        ("10.1.2.3", (), "10.1.2.3"),
        ("10.1.2.3", ("10.4.4.4",), "10.4.4.4"),
        # Garbage next to the proxy: counted by the hop that passed it, never by the garbage.
        ("10.1.2.3", ("198.51.100.1, unknown",), "10.1.2.3"),
        ("10.1.2.3", ("198.51.100.1, 10.4.4.4, <script>",), "10.1.2.3"),
        ("10.1.2.3", ("<script>, 10.4.4.4",), "10.4.4.4"),
        # IPv6: a host's /64 is one client; IPv4-mapped addresses are their IPv4 address.
        ("2001:db8:1:2:3:4:5:6", (), "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.9", (), "203.0.113.9"),
        # A trusted proxy seen through a dual-stack listener, and one that writes mapped hops.
        ("::ffff:10.77.0.1", ("198.51.100.1",), "198.51.100.1"),
        ("[::ffff:10.77.0.1]:4000", ("198.51.100.1",), "198.51.100.1"),
        ("10.1.2.3", ("198.51.100.1, ::ffff:10.9.9.9",), "198.51.100.1"),
        ("2001:db8:ffff::7", ("2001:db8:1:2::9",), "2001:db8:1:2::/64"),
        # No peer at all (a UNIX socket).
        (None, ("198.51.100.1",), "-"),
    ],
)
def test_the_client_behind_trusted_proxies(
    peer: str | None, forwarded: tuple[str, ...], client: str
) -> None:
    assert ClientAddress(PROXIES).of(scope(peer, *forwarded)) == client


def test_with_no_trusted_proxy_the_header_is_never_read() -> None:
    addresses = ClientAddress(())
    assert addresses.of(scope("10.1.2.3", "198.51.100.1")) == "10.1.2.3"
    assert addresses.of(scope("127.0.0.1", "198.51.100.1")) == "127.0.0.1"


def test_the_peer_cache_stays_bounded() -> None:
    addresses = ClientAddress(PROXIES)
    for n in range(10_000):
        addresses.of(scope(f"198.18.{n // 256}.{n % 256}"))
    assert len(addresses._peer_trusted) <= 4096


def test_a_bad_cidr_fails_start_up_naming_the_setting() -> None:
    with pytest.raises(SystemExit, match="FLASHSALE_TRUSTED_PROXIES"):
        ClientAddress(("10.0.0.0/33",))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1.2.3.4", "1.2.3.4"),
        (" 1.2.3.4:80 ", "1.2.3.4"),
        ("::1", "::1"),
        ("[::1]:8", "::1"),
        ("::ffff:10.77.0.1", "10.77.0.1"),
        ("[::ffff:10.77.0.1]:80", "10.77.0.1"),
    ],
)
def test_address_forms(text: str, parsed: str) -> None:
    assert str(parse_address(text)) == parsed


@pytest.mark.parametrize("text", ["", "unknown", "1.2.3", "[::1", "1.2.3.4:80:90", "999.1.1.1"])
def test_not_addresses(text: str) -> None:
    assert parse_address(text) is None
