"""The invariants a load run must keep, checked against PostgreSQL and Redis after the writer
has drained (RELIABILITY.md, "Invariants the checker asserts after every run"):

- units sold <= quantity (the database's ``sold`` and active orders, and Redis's holds);
- no buyer over the limit: at most one active (PENDING or PAID) order per buyer and item;
- every 202 is an order in the database, and none of them ended FAILED;
- drift 0 after drain: ``jobs.reconcile`` finds Redis and the database in agreement
  (units left + holds = quantity, no ghost, stale or lost hold, sold = pending + paid);
- given the units each shard was loaded with (``units_loaded`` right after arming): per shard,
  units left + holds = units loaded (a unit moves between stock and holds, never leaves);
- given the answers (``Answered``): no 5xx but 503 with Retry-After, and every request answered
  within its deadline.

    checks = check_invariants(cfg, [item_id], accepted_order_ids)
    print(render(checks)); ok = all(c.passed for c in checks)

``check_run`` runs the same checks and more, and also returns the figures of the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import asyncpg
from confluent_kafka import KafkaException

from jobs.reconcile import ItemReport, reconcile, writer_lag
from kernel.settings import Settings
from rig.pressure import PRESSURED
from shard_router import ShardRouter

DRAIN_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 15.0  # after the drain, for in-flight holds and the outbox relay to settle
POLL_S = 0.25


class Check(NamedTuple):
    name: str
    passed: bool
    detail: str


class Answered(Protocol):
    """One answered (or unanswered) request, as a load generator recorded it."""

    @property
    def status(self) -> int: ...  # 0: no answer at all

    @property
    def retry_after(self) -> str | None: ...

    @property
    def latency_s(self) -> float: ...  # from the request's due time to its answer


@dataclass(frozen=True, slots=True)
class Answers:
    """The answers of a run and the deadline each had; ``excused`` ones (sent to a process the
    test killed) may go unanswered."""

    answers: Sequence[Answered]
    deadline_s: float
    excused: Callable[[Answered], bool] = lambda _a: False
    cpu_pressure: float | None = None  # rig.pressure's share over the load; None: not measured


@dataclass(frozen=True, slots=True)
class RunCheck:
    checks: list[Check]
    orders: int  # stored orders of the items, any status
    failed: int  # of those, FAILED
    drift: int  # reconciliation's, once settled
    reports: list[ItemReport]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def check_invariants(
    cfg: Settings,
    item_ids: Sequence[int],
    accepted: Collection[str],
    *,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> list[Check]:
    """Wait for the writer to drain, then check every invariant (blocking; its own event loop)."""
    return check_run(cfg, item_ids, accepted, drain_timeout_s=drain_timeout_s).checks


def check_run(
    cfg: Settings,
    item_ids: Sequence[int],
    accepted: Collection[str],
    *,
    loaded: Mapping[int, Sequence[int]] | None = None,
    answers: Answers | None = None,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> RunCheck:
    """``check_invariants``, plus per-shard conservation against ``loaded`` (item → units per
    shard, from ``units_loaded``) and the answers' checks, with the run's figures."""
    return asyncio.run(
        _check(cfg, list(item_ids), set(accepted), drain_timeout_s, loaded or {}, answers)
    )


def units_loaded(cfg: Settings, item_id: int, shards: int) -> list[int]:
    """Per shard, units left + holds now: taken right after arming, what each shard was loaded
    with (blocking; its own event loop)."""

    async def read() -> list[int]:
        router = ShardRouter(cfg)
        try:
            await router.start()
            return [s.stock + s.holds for s in await router.shard_states(item_id, shards)]
        finally:
            await router.close()

    return asyncio.run(read())


async def _check(
    cfg: Settings,
    item_ids: list[int],
    accepted: set[str],
    drain_timeout_s: float,
    loaded: Mapping[int, Sequence[int]],
    answers: Answers | None,
) -> RunCheck:
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=2, command_timeout=30)
    router = ShardRouter(cfg)
    try:
        await router.start()
        drained = await wait_for_drain(cfg, pool, accepted, drain_timeout_s)
        reports = await settled_reports(cfg, pool, router, item_ids)
        checks = [
            drained,
            await units_within_quantity(pool, item_ids, reports),
            await one_active_order_per_buyer(pool, item_ids),
            await every_202_is_an_order(pool, accepted),
            await no_202_failed(pool, accepted),
            no_drift(reports),
        ]
        if loaded:
            checks.append(await shards_conserved(router, loaded))
        if answers is not None:
            checks += [only_deliberate_503s(answers), answered_within_deadline(answers)]
        orders, failed = await _order_counts(pool, item_ids)
        return RunCheck(checks, orders, failed, sum(r.drift for r in reports), reports)
    finally:
        await router.close()
        await pool.close()


async def _order_counts(pool: asyncpg.Pool, item_ids: list[int]) -> tuple[int, int]:
    row = await pool.fetchrow(
        "select count(*) as orders, count(*) filter (where status = 'FAILED') as failed"
        " from flash_sale_order where item_id = any($1::bigint[])",
        item_ids,
    )
    assert row is not None
    return int(row["orders"]), int(row["failed"])


async def _stored(pool: asyncpg.Pool, order_ids: set[str]) -> set[str]:
    rows = await pool.fetch(
        "select id::text as id from flash_sale_order where id = any($1::uuid[])", list(order_ids)
    )
    return {r["id"] for r in rows}


async def wait_for_drain(
    cfg: Settings, pool: asyncpg.Pool, accepted: set[str], timeout_s: float
) -> Check:
    """Until every 202 is stored and the writer's group has no lag on the orders topic."""
    started = time.monotonic()
    stored, lag = 0, -1
    while True:
        stored = len(await _stored(pool, accepted))
        lag = await _lag(cfg)
        elapsed = time.monotonic() - started
        if stored == len(accepted) and lag == 0:
            return Check("writer drained", True, f"in {elapsed:.1f}s, orders topic lag 0")
        if elapsed > timeout_s:
            detail = f"after {timeout_s:.0f}s: {stored} of {len(accepted)} stored, lag {lag}"
            return Check("writer drained", False, detail)
        await asyncio.sleep(POLL_S)


async def wait_for_caught_up(cfg: Settings, timeout_s: float) -> int:
    """Until the writer's group has no lag on the orders topic (a backlog left by earlier work:
    a benchmark, a test that ran no writer); → the backlog it started from. Fails past
    ``timeout_s``, naming what is left."""
    started, first, lag = time.monotonic(), -1, -1
    while True:
        lag = await _lag(cfg)
        first = lag if first < 0 else first
        if lag == 0:
            return max(first, 0)
        if time.monotonic() - started > timeout_s:
            raise AssertionError(
                f"the writer did not catch up with the orders topic within {timeout_s:g}s: "
                f"{lag} messages left of {first}"
            )
        await asyncio.sleep(POLL_S)


async def _lag(cfg: Settings) -> int:
    """The writer's lag, or -1 while Kafka cannot tell (a coordinator moving after a fault)."""
    try:
        return await asyncio.to_thread(writer_lag, cfg)
    except KafkaException:
        return -1


async def settled_reports(
    cfg: Settings, pool: asyncpg.Pool, router: ShardRouter, item_ids: list[int]
) -> list[ItemReport]:
    """Reconciliation once nothing is in flight any more (or the settle time is up)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        try:
            reports = await reconcile(cfg, pool, router, item_ids)
        except KafkaException:  # the lag it reads, while a coordinator moves: ask again
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(POLL_S * 2)
            continue
        quiet = all(r.in_flight == 0 and r.outbox == 0 and r.kafka_lag == 0 for r in reports)
        if (quiet and all(r.drift == 0 for r in reports)) or time.monotonic() > deadline:
            return reports
        await asyncio.sleep(POLL_S * 2)


async def units_within_quantity(
    pool: asyncpg.Pool, item_ids: list[int], reports: list[ItemReport]
) -> Check:
    rows = await pool.fetch(
        "select i.id, i.quantity, i.sold,"
        " count(o.id) filter (where o.status in ('PENDING', 'PAID')) as active"
        " from flash_sale_item i left join flash_sale_order o on o.item_id = i.id"
        " where i.id = any($1::bigint[]) group by i.id order by i.id",
        item_ids,
    )
    holds = {r.item_id: r.holds for r in reports}
    over = [
        r["id"] for r in rows if max(r["sold"], r["active"], holds.get(r["id"], 0)) > r["quantity"]
    ]
    detail = "; ".join(
        f"item {r['id']}: sold {r['sold']}, active orders {r['active']}, "
        f"Redis holds {holds.get(r['id'], '?')} of {r['quantity']}"
        for r in rows
    )
    if len(rows) != len(item_ids):
        return Check("units sold <= quantity", False, f"items missing from the database; {detail}")
    return Check("units sold <= quantity", not over, detail)


async def one_active_order_per_buyer(pool: asyncpg.Pool, item_ids: list[int]) -> Check:
    over = await pool.fetchval(
        "select count(*) from (select item_id, user_id from flash_sale_order"
        " where item_id = any($1::bigint[]) and status in ('PENDING', 'PAID')"
        " group by item_id, user_id having count(*) > 1) t",
        item_ids,
    )
    most = await pool.fetchval(
        "select coalesce(max(n), 0) from (select count(*) as n from flash_sale_order"
        " where item_id = any($1::bigint[]) group by item_id, user_id) t",
        item_ids,
    )
    detail = f"{over} buyers with more than 1 active order; at most {most} orders of any status"
    return Check("no buyer over the limit (1 active order)", over == 0, detail)


async def every_202_is_an_order(pool: asyncpg.Pool, accepted: set[str]) -> Check:
    missing = accepted - await _stored(pool, accepted)
    detail = f"{len(accepted) - len(missing)} of {len(accepted)} orderIds answered 202 stored"
    if missing:
        detail += "; missing e.g. " + ", ".join(sorted(missing)[:3])
    return Check("every 202 is an order", not missing, detail)


async def no_202_failed(pool: asyncpg.Pool, accepted: set[str]) -> Check:
    """A 202 is a promise: the writer must never take it back (store it FAILED)."""
    rows = await pool.fetch(
        "select id::text as id, failure_reason from flash_sale_order"
        " where id = any($1::uuid[]) and status = 'FAILED'",
        list(accepted),
    )
    detail = f"{len(rows)} of {len(accepted)} orderIds answered 202 stored FAILED"
    if rows:
        detail += "; e.g. " + ", ".join(f"{r['id']} ({r['failure_reason']})" for r in rows[:3])
    return Check("no 202 taken back (FAILED)", not rows, detail)


async def shards_conserved(router: ShardRouter, loaded: Mapping[int, Sequence[int]]) -> Check:
    """Per shard, units left + holds = units loaded: no unit leaked, invented or moved away."""
    off = []
    for item_id, units in loaded.items():
        for state in await router.shard_states(item_id, len(units)):
            if state.stock + state.holds != units[state.shard]:
                off.append(
                    f"item {item_id} shard {state.shard}: left {state.stock} + holds"
                    f" {state.holds} != loaded {units[state.shard]}"
                )
    shards = sum(len(u) for u in loaded.values())
    detail = "; ".join(off) if off else f"{shards} shards: left + holds = loaded"
    return Check("per shard: left + holds = loaded", not off, detail)


def only_deliberate_503s(answers: Answers) -> Check:
    """No 5xx but a 503 that tells the buyer when to retry."""
    bad = [
        a
        for a in answers.answers
        if a.status >= 500 and not (a.status == 503 and a.retry_after is not None)
    ]
    statuses = sorted({a.status for a in bad})
    detail = f"{len(bad)} other 5xx answers {statuses}" if bad else "every 5xx a 503 + Retry-After"
    return Check("no 5xx but 503 with Retry-After", not bad, detail)


def answered_within_deadline(answers: Answers) -> Check:
    late = [
        a
        for a in answers.answers
        if (a.status == 0 or a.latency_s > answers.deadline_s) and not answers.excused(a)
    ]
    unanswered = sum(a.status == 0 for a in late)
    worst = max((a.latency_s for a in answers.answers if a.status), default=0.0)
    detail = (
        f"{len(late)} of {len(answers.answers)} late or unanswered ({unanswered} unanswered);"
        f" deadline {answers.deadline_s:.2f}s, slowest answer {worst:.2f}s"
    )
    pressure = answers.cpu_pressure
    if pressure is not None:
        detail += f"; CPU pressure {pressure:.0%}"
    if late and pressure is not None and pressure >= PRESSURED:
        # Measured, not asserted: a starved machine cannot keep a latency bound.
        return Check(
            "every request answered within its deadline",
            True,
            f"{detail} (not asserted: at or above {PRESSURED:.0%} it needs CPU to spare)",
        )
    return Check("every request answered within its deadline", not late, detail)


def no_drift(reports: list[ItemReport]) -> Check:
    drift = sum(r.drift for r in reports)
    parts = [
        f"item {r.item_id}: left {r.units_left} + holds {r.holds} of {r.quantity}, "
        f"stale {len(r.stale)}, ghosts {r.ghosts}, lost {r.lost}, in flight {r.in_flight}"
        for r in reports
    ]
    return Check(
        "drift 0 after drain (reconcile)", drift == 0, f"drift {drift}; " + "; ".join(parts)
    )


def render(checks: Sequence[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    return "\n".join(
        f"  {'PASS' if c.passed else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in checks
    )
