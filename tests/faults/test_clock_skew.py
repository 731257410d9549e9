"""Clock skew on one gateway (libfaketime, the wall clock only: the monotonic clock that drives
deadlines, buckets and caches stays true), under the whole system and a steady load.

As documented (docs/reliability.md): the sale opens by the server's clock, so each gateway opens
it when its own clock reaches ``startsAt``; and tokens are checked against that clock with
``jwt_leeway_seconds`` of leeway, so a token outside the leeway is rejected there. Units stay
exact whatever the clocks say: Redis decides.

Decisions that compare times written by different processes never read this wall clock: the
outbox relay ages an entry by its own monotonic clock from when it first saw it, and a waiting
room is sealed, shuffled and admitted from when Redis's clock reaches ``startsAt``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import jwt
import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter
from tests.faults.conftest import FAULTS_PORT, RATE, SHARDS, show
from tests.gateway.test_waiting_room import _room_sale
from tests.support.constants import QUICK_RELAY
from tests.support.system import GatewaySpec, System, fresh_buyers
from tests.support.system_load import Answer, purchase_path

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

SKEW_S = 30  # the skewed gateway's wall clock runs this far ahead
OPENS_IN_S = 6  # real seconds from the sale's creation to startsAt
DURATION_S = 14.0
QUANTITY = 4000  # never sold out: a sold-out flag answers 410 before any token check
EDGE_S = 0.5  # scheduling around the opening instant
PROBE_AT_S = 10.0
PROBE_TRIES = 5


# A probe's token claims, from the true clock at the moment it is signed. Each is this far
# from the leeway's edge as the skewed gateway sees it, so a slow answer cannot tip it over.
MARGIN_S = 4
Claims = Callable[[int, int], dict[str, int]]  # (true now, leeway) -> claims


def _stale(now: int, leeway: int) -> dict[str, int]:
    """exp in the true future, but past on the skewed clock by more than the leeway."""
    return {"exp": now + SKEW_S - leeway - MARGIN_S}


def _fresh(now: int, leeway: int) -> dict[str, int]:
    """exp past on the skewed clock, but within the leeway."""
    return {"exp": now + SKEW_S - leeway + MARGIN_S}


def _early(now: int, leeway: int) -> dict[str, int]:
    """nbf ahead of the true clock by more than the leeway, already past on the skewed one."""
    return {"exp": now + 3600, "nbf": now + leeway + MARGIN_S}


def _probe(system: System, gateway: int, item_id: int, claims: Claims) -> tuple[int, str | None]:
    """One buyer's purchase, retried after a 503 (load shed) as a buyer would, with a token
    signed just before each attempt."""
    buyer = fresh_buyers(1)[0]
    for _ in range(PROBE_TRIES):
        now, leeway = int(time.time()), system.cfg.jwt_leeway_seconds
        body = {"sub": str(buyer), "iat": now, **claims(now, leeway)}
        token = jwt.encode(body, system.cfg.jwt_secret, "HS256")
        answer = httpx.post(
            system.bases[gateway] + purchase_path(item_id),
            headers={"Authorization": f"Bearer {token}"},
            timeout=system.deadline_s,
        )
        if answer.status_code != 503:
            break
        time.sleep(float(answer.headers.get("Retry-After", "1")))
    return answer.status_code, answer.json().get("orderId")


def _of(answers: list[Answer], gateway: int, start_s: float, end_s: float) -> set[int]:
    """The statuses answered by ``gateway`` to buyers due in [start_s, end_s). A request with
    no answer (status 0: its connection lost on a starved machine) says nothing about the
    clock; the report's deadline check judges it, against the machine's load."""
    return {
        a.status
        for a in answers
        if a.gateway == gateway and start_s <= a.due_s < end_s and a.status != 0
    }


def _skewed() -> GatewaySpec:
    if shutil.which("faketime") is None:
        pytest.fail("faketime is missing (Debian's faketime package; scripts/bootstrap)")
    return GatewaySpec(
        env={"FAKETIME_DONT_FAKE_MONOTONIC": "1"}, prefix=("faketime", "-f", f"+{SKEW_S}s")
    )


def test_a_gateway_with_a_skewed_clock_keeps_the_documented_window_and_token_checks(
    whole: Settings,
) -> None:
    skewed = _skewed()
    with System(whole, "clock-skew", port=FAULTS_PORT, gateways=[GatewaySpec(), skewed]) as system:
        sale = system.sale(QUANTITY, SHARDS, opens_in_s=OPENS_IN_S)
        load = system.load(sale, rate=RATE, duration_s=DURATION_S)
        opens_at = sale.starts_at - (time.time() - load.now())  # on the load's clock
        load.sleep_until(PROBE_AT_S)
        item = sale.item_id
        probes = {
            "true clock, exp past the skewed clock": _probe(system, 0, item, _stale),
            "skewed clock, exp past it beyond the leeway": _probe(system, 1, item, _stale),
            "skewed clock, exp past it within the leeway": _probe(system, 1, item, _fresh),
            "true clock, nbf ahead of it beyond the leeway": _probe(system, 0, item, _early),
        }
        answers = load.result()
        accepted = {order for status, order in probes.values() if status == 202 and order}
        report = system.check(sale, answers, accepted=accepted, calm_until_s=None)
    # Before the start, judged by when the gateway answered (a buyer due before it but answered
    # after it, on a starved machine, rightly bought); a request with no answer says nothing
    # about the clock (the report's deadline check judges it).
    before_true = {
        a.status
        for a in answers
        if a.gateway == 0 and a.done_s < opens_at - EDGE_S and a.status != 0
    }
    after_true = _of(answers, 0, opens_at + EDGE_S, DURATION_S)
    skewed_all = _of(answers, 1, 0, DURATION_S)
    show(
        report,
        f"opens at {opens_at:.1f}s (load clock); true-clock gateway before: {before_true},"
        f" after: {after_true}; skewed gateway (+{SKEW_S}s) throughout: {skewed_all}",
        *(f"probe {name}: {status}" for name, (status, _) in probes.items()),
    )
    report.assert_kept()
    # A 503 (deliberate, checked above) is load shed on this busy box, whatever the clock says.
    assert before_true - {503} == {403}, before_true  # SALE_NOT_OPEN by its own clock
    assert after_true <= {202, 410, 503} and 202 in after_true, after_true
    # The skewed clock reached startsAt SKEW_S early: that gateway sold from the start.
    assert skewed_all <= {202, 410, 503} and 202 in skewed_all, skewed_all
    statuses = [status for status, _ in probes.values()]
    assert statuses == [202, 401, 202, 401], probes


RELAY_MIN_AGE_S = QUICK_RELAY["outbox_relay_min_age_ms"] / 1000
RELAY_DEADLINE_S = 20.0
POLL_S = 0.02


async def _fresh_entry_relayed_after(cfg: Settings, item_id: int) -> tuple[float, str]:
    """A purchase's unit, hold and outbox entry, written as a gateway does just before its
    hand-off to Kafka and dated by the true clock; → (seconds until a relay re-sent it, as
    seen by its ack dropping the entry, orderId)."""
    router = ShardRouter(cfg)
    await router.start()
    try:
        buyer, order_id = fresh_buyers(1)[0], new_order_id(item_id)
        now_ms = int(time.time() * 1000)

        def payload(shard: int) -> bytes:
            home = buyer % SHARDS
            return encode(
                OrderPlaced(order_id, item_id, buyer, shard, home, now_ms, now_ms + 600_000)
            )

        written = time.monotonic()
        got = await router.reserve(item_id, SHARDS, buyer, order_id, payload)
        assert got.outcome is Outcome.RESERVED, got
        while order_id in await router.outbox(item_id, got.unit_shard):
            assert time.monotonic() - written < RELAY_DEADLINE_S, "no relay re-sent the entry"
            await asyncio.sleep(POLL_S)
        return time.monotonic() - written, order_id
    finally:
        await router.close()


async def _stored(cfg: Settings, order_id: str) -> bool:
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=1)
    try:
        deadline = time.monotonic() + RELAY_DEADLINE_S
        while time.monotonic() < deadline:
            if await pool.fetchval("select count(*) from flash_sale_order where id = $1", order_id):
                return True
            await asyncio.sleep(0.2)
        return False
    finally:
        await pool.close()


def test_a_relay_with_a_clock_ahead_never_resends_a_fresh_entry(whole: Settings) -> None:
    """A fresh entry is the hand-off's until ``outbox_relay_min_age_ms`` has passed: a re-send
    before that, followed by the hand-off's NeverSent give-back, is an order in Kafka whose unit
    is back on sale. The relay of a gateway whose clock runs 30 s ahead must wait as long."""
    with System(whole, "clock-skew-relay", port=FAULTS_PORT, gateways=[_skewed()]) as system:
        sale = system.sale(10, SHARDS)
        age_s, order_id = asyncio.run(_fresh_entry_relayed_after(system.cfg, sale.item_id))
        stored = asyncio.run(_stored(system.cfg, order_id))
    print(f"\n  relayed {age_s:.2f}s after it was written (min age {RELAY_MIN_AGE_S}s)")
    assert age_s >= RELAY_MIN_AGE_S, age_s  # before: within one relay round (about 0.5 s)
    assert stored  # and it is still delivered, once it is old by the relay's own clock


ROOM_OPENS_IN_S = 15  # true seconds; the skewed gateway sees the start 15 s in the past
ROOM_BUYERS = 8
ROOM_MARGIN_S = 1.0  # the last look before the start, and after it, the scheduling slack


async def _meta(cfg: Settings, sale: int) -> set[bytes | str]:
    """The fields of the room's meta hash (``sealed`` and ``placed`` once the start is past)."""
    router = ShardRouter(cfg)
    await router.start()
    try:
        return set(await router.client.hkeys(f"{{room:{sale}}}:meta"))
    finally:
        await router.close()


ADMISSION_S = 20  # shorter than the skew: by the skewed gateway's own clock, an admission the
# true one writes would have run out 10 s before it was written
ADMISSION_POLL_S = 0.5  # between polls: the buyer's poll bucket refills 2 a second
ADMISSION_SLACK_S = 3.0  # whole seconds in the token, and an answer's time on a busy machine


def _admitted(queue: str, auth: dict[str, str], ticket: str, until: float) -> dict[str, Any]:
    """Poll the ticket (through 503s and 429s, as a client would) until it is admitted."""
    while time.time() < until:
        polled = httpx.get(queue, headers={**auth, "X-Queue-Ticket": ticket}, timeout=10)
        if polled.status_code == 200:
            body: dict[str, Any] = polled.json()
            if body["state"] == "ADMITTED":
                return body
            ticket = body["ticket"]
        time.sleep(ADMISSION_POLL_S)
    raise AssertionError(f"not admitted by {until - time.time():.0f} s from now")


def _cross_purchases(
    cfg: Settings, bases: list[str], sale: int, item: int, until: float
) -> dict[int, tuple[float, int]]:
    """One new buyer joins and is admitted through each gateway, then buys through the other:
    admitted through → (the admission's expiry minus the true clock's, window added; the
    purchase's status)."""
    seen: dict[int, tuple[float, int]] = {}
    for admitted_by, buyer in enumerate(fresh_buyers(len(bases))):
        auth = {"Authorization": f"Bearer {sign_token(cfg, buyer)}"}
        queue = f"{bases[admitted_by]}/api/flash-sales/sales/{sale}/queue"
        joined = httpx.post(queue, headers=auth, timeout=10)
        assert joined.status_code == 200, joined.text
        body = _admitted(queue, auth, joined.json()["ticket"], until)
        expires_at = dt.datetime.fromisoformat(body["admissionExpiresAt"]).timestamp()
        error_s = expires_at - (time.time() + ADMISSION_S)
        bought = httpx.post(
            f"{bases[1 - admitted_by]}{purchase_path(item)}",
            headers={**auth, "X-Admission": body["admission"]},
            timeout=10,
        )
        seen[admitted_by] = (error_s, bought.status_code)
    return seen


def test_a_gateway_with_a_clock_ahead_neither_seals_nor_admits_a_room_early(
    whole: Settings,
) -> None:
    """Early arrivals join through a gateway whose clock is 30 s ahead: until Redis's clock
    reaches startsAt nothing is sealed and nobody is admitted; after it, all are placed at
    random and admitted. Then an admission's expiry is written and judged by Redis's clock: a
    buyer admitted through either gateway buys through the other."""
    gateways = [GatewaySpec(), _skewed()]
    env = settings_env(waiting_room_admission_s=ADMISSION_S)
    with System(whole, "clock-skew-room", port=FAULTS_PORT, gateways=gateways, env=env) as system:
        true_base, skewed_base = system.bases
        sale, item, starts_at = _room_sale(true_base, 100, ROOM_OPENS_IN_S, rate=100)
        queue = f"{skewed_base}/api/flash-sales/sales/{sale}/queue"
        tickets: dict[int, str] = {}
        auth: dict[int, dict[str, str]] = {}  # each buyer polls with its own token
        for buyer in fresh_buyers(ROOM_BUYERS):
            auth[buyer] = {"Authorization": f"Bearer {sign_token(system.cfg, buyer)}"}
            joined = httpx.post(queue, headers=auth[buyer], timeout=10)
            assert joined.status_code == 200, joined.text
            tickets[buyer] = joined.json()["ticket"]
        early_states: set[str] = set()
        while time.time() < starts_at - ROOM_MARGIN_S:
            meta = asyncio.run(_meta(system.cfg, sale))
            if time.time() < starts_at:
                assert not {b"sealed", b"placed"} & meta, (starts_at - time.time(), meta)
            for buyer, ticket in tickets.items():
                polling = {**auth[buyer], "X-Queue-Ticket": ticket}
                polled = httpx.get(queue, headers=polling, timeout=10)
                if polled.status_code == 200 and time.time() < starts_at:  # answered early
                    early_states.add(polled.json()["state"])
                    tickets[buyer] = polled.json()["ticket"]
            time.sleep(ROOM_MARGIN_S / 2)
        admitted: set[int] = set()
        deadline = starts_at + ROOM_MARGIN_S + 10
        while len(admitted) < ROOM_BUYERS and time.time() < deadline:
            for buyer, ticket in tickets.items():
                polling = {**auth[buyer], "X-Queue-Ticket": ticket}
                polled = httpx.get(queue, headers=polling, timeout=10)
                if polled.status_code == 200:
                    tickets[buyer] = polled.json()["ticket"]
                    if polled.json()["state"] == "ADMITTED":
                        admitted.add(buyer)
            time.sleep(ROOM_MARGIN_S / 2)
        crossed = _cross_purchases(system.cfg, system.bases, sale, item, deadline + 10)
    print(f"\n  before the start: {early_states}; admitted after it: {len(admitted)}")
    print(f"  admitted through gateway → (expiry's error, purchase through the other): {crossed}")
    assert "ADMITTED" not in early_states, early_states  # before: admitted 15 s early
    assert admitted == set(tickets), admitted
    for admitted_by, (error_s, status) in crossed.items():
        # Before: the skewed gateway's expiry ran 30 s late, and its purchases refused the true
        # gateway's admissions (403 NOT_ADMITTED).
        assert abs(error_s) <= ADMISSION_SLACK_S, (admitted_by, error_s)
        assert status == 202, (admitted_by, status)
