"""Process rows of the fault matrix: a gateway SIGKILLed between the Lua call and the Kafka ack,
and the writer SIGKILLed mid-batch (before its commit, or after it but before its offsets) and
restarted; each under the whole system and a steady load."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

import aiohttp
import asyncpg
import pytest

from flashsale.stack.processes import settings_env, wait_until
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session
from shard_router import ShardRouter
from tests.faults.conftest import FAULTS_PORT, RATE, SHARDS, show
from tests.faults.fates import fates, summary
from tests.support.system import GatewaySpec, System, fresh_buyers
from tests.support.system_load import buy

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

FAULT_AT_S = 4.0
DURATION_S = 14.0
QUANTITY = 2000
# The doomed gateway takes seconds to start on a busy box, twice: the sale must not sell out
# before its last round reaches Redis.
UNSOLD = 10_000
DOOMED_ROUNDS = 2  # the doomed gateway is started, then killed by its first reservation
DOOMED_AT_ONCE = 5
DOOMED_TRIES = 10
DOOMED_WAIT_S = 1.0
WRITER_DEATH_TIMEOUT_S = 20.0
WRITER_DOWN_S = 3.0  # orders pile up on the topic meanwhile


async def _buy_at_once(system: System, item_id: int, buyers: list[int]) -> list[Answered]:
    """Purchases sent together to the doomed gateway: their Lua calls share a batch, so several
    units are taken before the first buyer's request reaches the failpoint and kills it."""
    timeout = aiohttp.ClientTimeout(total=system.deadline_s)
    async with client_session(timeout=timeout) as session:
        got = await asyncio.gather(
            *(buy(session, system.bases[1], item_id, sign_token(system.cfg, b)) for b in buyers)
        )
    return [Answered(b, *g) for b, g in zip(buyers, got, strict=True)]


def _doomed_round(system: System, item_id: int) -> list[Answered]:
    """Start the doomed gateway, then send it purchases a few at a time until one reaches the
    failpoint (a cold gateway may shed the first ones: 503 OVERLOADED)."""
    system.start_gateway(1)
    sent: list[Answered] = []
    for _ in range(DOOMED_TRIES):
        sent += asyncio.run(_buy_at_once(system, item_id, fresh_buyers(DOOMED_AT_ONCE)))
        if system.wait_gateway_exit(1, DOOMED_WAIT_S):
            return sent
    statuses = Counter(a.status or a.error for a in sent)
    raise AssertionError(f"the failpoint never fired; the doomed gateway answered {statuses}")


@dataclass(frozen=True, slots=True)
class Answered:
    buyer: int
    status: int
    retry_after: str | None
    order_id: str | None
    error: str


async def _held_by(cfg: Settings, item_id: int, buyers: list[int]) -> dict[int, str | None]:
    """Each buyer's dedup entry on their home shard (the order Redis says they hold)."""
    router = ShardRouter(cfg)
    try:
        await router.start()
        return {b: await router.buyer_order(item_id, SHARDS, b) for b in buyers}
    finally:
        await router.close()


async def _orders_of(cfg: Settings, item_id: int, buyers: list[int]) -> dict[int, list[str]]:
    conn = await asyncpg.connect(cfg.pg_dsn)
    try:
        rows = await conn.fetch(
            "select user_id, id::text as id from flash_sale_order"
            " where item_id = $1 and user_id = any($2::bigint[])",
            item_id,
            buyers,
        )
    finally:
        await conn.close()
    found: dict[int, list[str]] = {b: [] for b in buyers}
    for r in rows:
        found[r["user_id"]].append(r["id"])
    return found


def test_a_gateway_killed_between_lua_and_kafka_leaves_no_ghost_hold(whole: Settings) -> None:
    doomed = GatewaySpec(env=settings_env(failpoints=("gateway.after_reserve",)))
    gateways = [GatewaySpec(), doomed]
    with System(whole, "gateway-sigkill", port=FAULTS_PORT, gateways=gateways) as system:
        sale = system.sale(UNSOLD, SHARDS)
        system.stop_gateway(1)  # started for each round below, and killed by it
        load = system.load(sale, rate=RATE, duration_s=DURATION_S, targets=[0])
        load.sleep_until(FAULT_AT_S)
        doomed_answers: list[Answered] = []
        for _ in range(DOOMED_ROUNDS):
            doomed_answers += _doomed_round(system, sale.item_id)
        system.stop_gateway(1)  # dead: out of the system (and of its liveness check)
        answers = load.result()
        accepted = {a.order_id for a in doomed_answers if a.status == 202 and a.order_id}
        report = system.check(sale, answers, accepted=accepted, calm_until_s=FAULT_AT_S)
    buyers = [a.buyer for a in doomed_answers]
    orders = asyncio.run(_orders_of(whole, sale.item_id, buyers))
    held = asyncio.run(_held_by(whole, sale.item_id, buyers))
    found = fates(whole, sale.item_id, SHARDS, [o for ids in orders.values() for o in ids])
    reached = [b for b in buyers if orders[b] or held[b]]
    show(
        report,
        f"doomed purchases: {dict(Counter(a.status or a.error for a in doomed_answers))};"
        f" {len(reached)} of {len(buyers)} reached Redis:"
        f" {summary({o: found[o] for b in reached for o in orders[b]})}",
    )
    report.assert_kept()
    # Every buyer whose unit the dead gateway took has that one order, delivered by the outbox
    # relay, not FAILED, its unit and dedup entry held; any other buyer holds nothing.
    for buyer in buyers:
        ids = orders[buyer]
        if held[buyer] is None and not ids:
            continue
        assert len(ids) == 1 and held[buyer] == ids[0], f"buyer {buyer}: {ids}, Redis {held[buyer]}"
        assert found[ids[0]].status == "PENDING" and found[ids[0]].held, found[ids[0]]
    assert len(reached) >= DOOMED_ROUNDS  # each round's kill came after a reservation


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_writer_killed_mid_batch_and_restarted_loses_nothing(whole: Settings, point: str) -> None:
    armed = settings_env(failpoints=(f"writer.{point}",))
    with System(whole, f"writer-sigkill-{point}", port=FAULTS_PORT, writer=False) as system:
        sale = system.sale(QUANTITY, SHARDS)
        load = system.load(sale, rate=RATE, duration_s=DURATION_S)
        load.sleep_until(FAULT_AT_S)  # a backlog, so its first batch is a big one
        doomed = system.start_writer(armed)
        died = wait_until(lambda: doomed.poll() is not None, WRITER_DEATH_TIMEOUT_S)
        died_at = load.now()
        load.sleep_until(died_at + WRITER_DOWN_S)
        system.start_writer()
        answers = load.result()
        report = system.check(sale, answers, calm_until_s=FAULT_AT_S)
    show(
        report, f"writer killed at {point} {died_at:.1f}s into the load (exit {doomed.returncode})"
    )
    assert died, f"the writer never reached writer.{point}"
    report.assert_kept()
