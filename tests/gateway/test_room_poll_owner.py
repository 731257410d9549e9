"""Only a ticket's own buyer may poll it: the real poll handler (gateway/waiting_room/poll.py)
with the real token verifier, ticket signer, rooms and buckets, and every boundary faked (no
stack). Another buyer's token with the ticket is refused before anything is answered or
minted; the token and the ticket are checked without any I/O."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import msgspec
import pytest

from gateway.auth import TokenVerifier, sign_token
from gateway.client_address import ClientAddress
from gateway.ratelimit import RouteLimits, TokenBuckets
from gateway.services import Services
from gateway.waiting_room import queue
from gateway.waiting_room.frontier import Room, WaitingRooms
from gateway.waiting_room.poll import TICKET_HEADER, PollHandler
from gateway.waiting_room.tickets import Signer, Ticket
from kernel.settings import Settings

SALE, ITEM = 41, 410
OWNER, OTHER = 7001, 7002


class _NoIO:
    """A boundary the poll must not touch for these tickets (placed, of a known room)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the poll reached for {name}")


class _Flags:
    def is_sold_out(self, item_id: int) -> bool:
        return False


class Poll:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.verifier = TokenVerifier(cfg)
        services = Services(
            cfg=cfg,
            pool=cast(Any, _NoIO()),
            catalog=cast(Any, _NoIO()),
            router=cast(Any, _NoIO()),
            producer=cast(Any, _NoIO()),
            order_hand_off=cast(Any, _NoIO()),
            flags=cast(Any, _Flags()),
            verifier=self.verifier,
            user_buckets=cast(Any, _NoIO()),
            ip_buckets=cast(Any, _NoIO()),
            vouchers=cast(Any, _NoIO()),
            voucher_store=cast(Any, _NoIO()),
            voucher_hand_off=cast(Any, _NoIO()),
            voucher_flags=cast(Any, _NoIO()),
        )
        self.signer = Signer("room-secret")
        self.rooms = WaitingRooms(services, self.signer)
        now = time.time()
        self.rooms.rooms[SALE] = Room(
            SALE, now - 60, now + 3600, queue.Controls(1, False, 100), 0, (ITEM,)
        )
        self.rooms.frontier[SALE] = 5  # places 1..5 admitted
        limits = RouteLimits(cfg, TokenBuckets(1e9, 1e9))
        self.handler = PollHandler(services, ClientAddress(()), limits, self.rooms)
        self.tokens = {b: sign_token(cfg, b) for b in (OWNER, OTHER)}

    def ticket(self, buyer: int = OWNER, place: int = 3) -> str:
        return self.signer.ticket(Ticket(buyer, SALE, place, 1000))

    def __call__(
        self, ticket: str | None, authorization: str | None, sale: int = SALE
    ) -> tuple[int, dict[str, Any]]:
        headers = []
        if authorization is not None:
            headers.append((b"authorization", authorization.encode()))
        if ticket is not None:
            headers.append((TICKET_HEADER, ticket.encode()))
        scope = {"type": "http", "headers": headers, "client": ("127.0.0.1", 40000)}
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.handler(scope, send, str(sale)))
        start, body = sent
        return start["status"], msgspec.json.decode(body["body"])

    def by(self, buyer: int) -> str:
        return f"Bearer {self.tokens[buyer]}"


@pytest.fixture
def poll(cfg: Settings) -> Poll:
    return Poll(cfg)


def test_the_owner_is_admitted_with_an_admission_in_its_own_name(poll: Poll) -> None:
    status, body = poll(poll.ticket(), poll.by(OWNER))
    assert status == 200 and body["state"] == "ADMITTED", body
    assert poll.signer.admits(body["admission"], OWNER, SALE, time.time(), spent=0)


def test_another_buyers_ticket_is_refused_and_nothing_is_minted(poll: Poll) -> None:
    # Place 3 is within the frontier: its owner's poll would be ADMITTED.
    assert poll(poll.ticket(), poll.by(OTHER)) == (403, {"error": "TICKET_NOT_YOURS"})
    waiting = poll.ticket(place=50)  # the same for a ticket still waiting (no place revealed)
    assert poll(waiting, poll.by(OTHER)) == (403, {"error": "TICKET_NOT_YOURS"})
    # Before the room is looked at: an unknown sale would make the rooms be re-read (the pool).
    elsewhere = poll.signer.ticket(Ticket(OWNER, SALE + 1, 3, 1000))
    assert poll(elsewhere, poll.by(OTHER), sale=SALE + 1) == (403, {"error": "TICKET_NOT_YOURS"})
    # The owner's poll is unaffected.
    status, body = poll(poll.ticket(), poll.by(OWNER))
    assert status == 200 and body["state"] == "ADMITTED", body


def test_a_poll_without_a_valid_token_is_unauthorized(poll: Poll) -> None:
    unauthorized = (401, {"error": "UNAUTHORIZED"})
    assert poll(poll.ticket(), None) == unauthorized
    assert poll(poll.ticket(), "Bearer not-a-jwt") == unauthorized
    assert poll(poll.ticket(), poll.tokens[OWNER]) == unauthorized  # no "Bearer "
    forged = sign_token(Settings(env="local", jwt_secret="x" * 40), OWNER)
    assert poll(poll.ticket(), f"Bearer {forged}") == unauthorized
    expired = sign_token(poll.cfg, OWNER, ttl_seconds=-3600)
    assert poll(poll.ticket(), f"Bearer {expired}") == unauthorized


def test_the_owners_token_with_a_bad_ticket_is_an_invalid_ticket(poll: Poll) -> None:
    invalid = (401, {"error": "INVALID_TICKET"})
    assert poll(None, poll.by(OWNER)) == invalid
    assert poll("garbage", poll.by(OWNER)) == invalid
    assert poll(Signer("other").ticket(Ticket(OWNER, SALE, 3, 1000)), poll.by(OWNER)) == invalid


def test_refused_polls_count_against_the_pollers_bucket_not_the_owners(poll: Poll) -> None:
    ticket = poll.ticket()
    answers = [poll(ticket, poll.by(OTHER)) for _ in range(int(poll.cfg.waiting_room_buyer_burst))]
    assert answers == [(403, {"error": "TICKET_NOT_YOURS"})] * len(answers)
    assert poll(ticket, poll.by(OTHER))[0] == 429  # its own burst spent
    status, body = poll(ticket, poll.by(OWNER))
    assert status == 200 and body["state"] == "ADMITTED", body


def test_each_buyers_token_is_verified_once_then_remembered(
    poll: Poll, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll every Retry-After from everyone waiting: the signature is checked on the first."""
    verified: list[str] = []
    verify = poll.verifier._verify

    def counted(token: str, now: float) -> tuple[int, int]:
        verified.append(token)
        return verify(token, now)

    monkeypatch.setattr(poll.verifier, "_verify", counted)
    for _ in range(5):
        assert poll(poll.ticket(), poll.by(OWNER))[0] == 200
        assert poll(poll.ticket(), poll.by(OTHER))[0] == 403
    assert sorted(verified) == sorted(poll.tokens.values())
