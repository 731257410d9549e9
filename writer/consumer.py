"""The writer's loop: poll a batch, store it, dead-letter, give units back, commit offsets.
One loop per topic: the orders topic, and the vouchers topic (flash voucher uses, whose refused
holds go back and whose outbox entries are dropped in step 4 the same way).

Per batch, strictly in this order (a crash between any two steps redelivers the whole batch, and
every step is idempotent, so the outcome equals one clean pass):

1. parse: decode and validate (pure); poison and unsupported events become dead letters;
2. store: one PostgreSQL transaction (writer/sink.py), retried with bounded backoff;
3. dead-letter: refused orders and poison, flushed and acknowledged;
4. Redis: release the unit of every refused order (also of one refused by an earlier pass: a
   crash may have come between its commit and its release), and drop stored orders from their
   shard's outbox;
5. commit the batch's Kafka offsets, synchronously.

A step that keeps failing past its budget raises RetriesExhausted and the writer stops without
committing: after a restart the batch comes again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from kernel.failpoints import failpoint
from shard_router import ShardRouter, VoucherStore
from writer import metrics
from writer.batch import DeadLetter, Order, Record, Redemption, parse
from writer.deadletter import DeadLetterProducer
from writer.errors import DeadLetterUndelivered
from writer.retry import Backoff, db_rejected, db_retriable, never, redis_retriable, retrying
from writer.sink import Decision, Fate, Sink, SinkResult
from writer.source import OrderSource
from writer.voucher_sink import RELEASED_FATES, VoucherDecision, VoucherFate

log = logging.getLogger(__name__)


@dataclass(slots=True)
class WriterStats:
    """What one writer did; the benchmark reads it."""

    batches: int = 0
    messages: int = 0
    orders: dict[str, int] = field(default_factory=dict)  # by fate
    vouchers: dict[str, int] = field(default_factory=dict)  # voucher uses, by fate
    dead_letters: int = 0
    first_batch_at: float | None = None  # time.monotonic()
    last_commit_at: float | None = None


class OrderWriter:
    def __init__(
        self,
        source: OrderSource,
        sink: Sink,
        deadletter: DeadLetterProducer,
        router: ShardRouter,
        *,
        backoff: Backoff | None = None,
        stats: WriterStats | None = None,
        vouchers_topic: str | None = None,
    ) -> None:
        self.source = source
        self.sink = sink
        self.deadletter = deadletter
        self.router = router
        self.vouchers = VoucherStore(router)
        self.vouchers_topic = vouchers_topic  # voucher uses are taken from this topic only
        self.backoff = backoff or Backoff()
        self.stats = stats or WriterStats()

    async def run(self, stop: asyncio.Event, *, once: bool = False) -> None:
        """Until ``stop`` is set; with ``once``, until the group has drained the topic."""
        while not stop.is_set():
            records = await self.source.poll_batch()
            if records:
                await self.handle(records)
            elif once and await self.source.drained():
                return
            await self._refresh_lag()

    async def handle(self, records: Sequence[Record]) -> None:
        if self.stats.first_batch_at is None:
            self.stats.first_batch_at = time.monotonic()
        metrics.BATCH_SIZE.observe(len(records))
        batch = parse(records, self.vouchers_topic)
        result, rejected = await self._store(batch.orders, batch.redemptions)
        if batch.orders:
            failpoint("writer.after_commit")
        if batch.redemptions:
            failpoint("writer.vouchers.after_commit")
        letters = batch.dead_letters + rejected + _dead_letters(result)
        await self._dead_letter(letters)
        await self._settle_redis(result)
        await self.source.commit(batch.offsets)
        self._count(len(records), result, letters)

    async def _store(
        self, orders: list[Order], redemptions: list[Redemption]
    ) -> tuple[SinkResult, list[DeadLetter]]:
        """Store the batch; a batch PostgreSQL rejects outright is split to find the culprit."""
        try:
            return await self._write(orders, redemptions), []
        except Exception as exc:
            if not db_rejected(exc):
                raise
            if len(orders) + len(redemptions) == 1:
                one = orders[0] if orders else redemptions[0]
                log.error("database rejected order %s: %r", one.event.order_id, exc)
                reason = f"rejected by the database: {exc}"
                return SinkResult([], {}), [DeadLetter(one.record, "rejected", reason)]
            size = len(orders) + len(redemptions)
            log.error("database rejected a batch of %d, storing one by one: %r", size, exc)
        decisions: list[Decision] = []
        shards: dict[int, int] = {}
        vouchers: list[VoucherDecision] = []
        rejected: list[DeadLetter] = []
        singles: list[tuple[list[Order], list[Redemption]]] = [([o], []) for o in orders]
        singles += [([], [r]) for r in redemptions]
        for some_orders, some_redemptions in singles:
            result, bad = await self._store(some_orders, some_redemptions)
            decisions += result.decisions
            shards |= result.shards
            vouchers += result.vouchers
            rejected += bad
        return SinkResult(decisions, shards, vouchers), rejected

    async def _write(self, orders: list[Order], redemptions: list[Redemption]) -> SinkResult:
        async def attempt() -> SinkResult:
            started = time.perf_counter()
            result = await self.sink.write(orders, redemptions)
            metrics.COMMIT_SECONDS.observe(time.perf_counter() - started)
            return result

        if not orders and not redemptions:
            return SinkResult([], {})
        return await retrying("db", attempt, db_retriable, self.backoff)

    async def _dead_letter(self, letters: list[DeadLetter]) -> None:
        remaining = letters

        async def attempt() -> None:
            nonlocal remaining
            remaining = await asyncio.to_thread(self.deadletter.publish, remaining)
            if remaining:
                raise DeadLetterUndelivered(f"{len(remaining)} of {len(letters)} not acknowledged")

        if letters:
            await retrying("deadletter", attempt, never, self.backoff)
            for letter in letters:
                metrics.DEAD_LETTERS.labels(letter.kind).inc()

    async def _settle_redis(self, result: SinkResult) -> None:
        releases = {
            d.order.event.order_id: d
            for d in result.with_fate(Fate.REFUSED, Fate.FAILED_BEFORE)
            if d.order.event.item_id in result.shards
        }
        acks: dict[tuple[int, int], set[str]] = defaultdict(set)
        for d in result.decisions:
            if d.fate is not Fate.UNKNOWN_ITEM:
                acks[(d.order.event.item_id, d.order.event.shard)].add(d.order.event.order_id)
        voucher_releases = {
            (d.redemption.event.code, d.redemption.event.order_id): d
            for d in result.vouchers_with_fate(*RELEASED_FATES)
        }
        voucher_acks: dict[str, set[str]] = defaultdict(set)
        for v in result.vouchers:
            voucher_acks[v.redemption.event.code].add(v.redemption.event.order_id)

        async def attempt() -> None:
            calls: list[Awaitable[object]] = [
                self._release(d, result.shards[d.order.event.item_id]) for d in releases.values()
            ]
            calls += [
                self.router.ack_outbox(item_id, shard, sorted(ids))
                for (item_id, shard), ids in acks.items()
            ]
            calls += [self._release_voucher_use(d) for d in voucher_releases.values()]
            calls += [
                self.vouchers.ack_outbox(code, sorted(ids)) for code, ids in voucher_acks.items()
            ]
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            failures = [o for o in outcomes if isinstance(o, BaseException)]
            if failures:
                raise failures[0]

        if releases or acks or voucher_releases or voucher_acks:
            await retrying("redis", attempt, redis_retriable, self.backoff)

    async def _release(self, decision: Decision, shards: int) -> None:
        event = decision.order.event
        if await self.router.release(
            event.item_id, shards, event.shard, event.user_id, event.order_id
        ):
            log.info("order %s refused (%s): unit given back", event.order_id, decision.reason)

    async def _release_voucher_use(self, decision: VoucherDecision) -> None:
        event = decision.redemption.event
        if await self.vouchers.release(event.code, event.order_id):
            log.info("voucher use %s refused (%s): use given back", event.order_id, decision.reason)

    async def _refresh_lag(self) -> None:
        # Local to librdkafka (position and the high watermark of the last fetch): cheap.
        metrics.set_lag(await self.source.lags())

    def _count(self, messages: int, result: SinkResult, letters: list[DeadLetter]) -> None:
        self.stats.batches += 1
        self.stats.messages += messages
        self.stats.dead_letters += len(letters)
        self.stats.last_commit_at = time.monotonic()
        fates = Counter(d.fate.value for d in result.decisions)
        for fate, n in fates.items():
            metrics.ORDERS.labels(fate).inc(n)
            self.stats.orders[fate] = self.stats.orders.get(fate, 0) + n
        voucher_fates = Counter(d.fate.value for d in result.vouchers)
        for fate, n in voucher_fates.items():
            metrics.VOUCHER_USES.labels(fate).inc(n)
            self.stats.vouchers[fate] = self.stats.vouchers.get(fate, 0) + n
        unusual = (
            letters
            or fates.keys() - {Fate.INSERTED.value}
            or voucher_fates.keys() - {VoucherFate.INSERTED.value}
        )
        described = [f"{n} {fate}" for fate, n in sorted(fates.items())]
        described += [f"{n} voucher uses {fate}" for fate, n in sorted(voucher_fates.items())]
        log.log(
            logging.INFO if unusual else logging.DEBUG,
            "batch of %d: %s, %d dead letters",
            messages,
            ", ".join(described) or "no orders",
            len(letters),
        )


def _dead_letters(result: SinkResult) -> list[DeadLetter]:
    kinds = {
        Fate.REFUSED: "refused",
        Fate.FAILED_BEFORE: "refused",
        Fate.UNKNOWN_ITEM: "unknown_item",
    }
    voucher_kinds = {
        VoucherFate.REFUSED: "refused",
        VoucherFate.FAILED_BEFORE: "refused",
        VoucherFate.CONFLICT: "refused",
        VoucherFate.UNKNOWN_VOUCHER: "unknown_voucher",
    }
    return [
        DeadLetter(d.order.record, kinds[d.fate], d.reason)
        for d in result.decisions
        if d.fate in kinds
    ] + [
        DeadLetter(v.redemption.record, voucher_kinds[v.fate], v.reason)
        for v in result.vouchers
        if v.fate in voucher_kinds
    ]
