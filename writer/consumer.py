"""The writer's loop: poll a batch, store it, dead-letter, settle Redis, commit offsets.
One loop per stream (writer/stream.py): the orders topic, and the vouchers topic (flash voucher
uses, settled in step 4 the same way).

Per batch, strictly in this order (a crash between any two steps redelivers the whole batch, and
every step is idempotent, so the outcome equals one clean pass):

1. parse: decode and validate (pure); poison and unsupported events become dead letters;
2. store: one PostgreSQL transaction (writer/sink.py), retried with bounded backoff;
3. dead-letter: refused rows, rows the database rejected outright and poison, flushed and
   acknowledged; the orderIds of poison, unsupported and invalid events (no row to store)
   recorded in PostgreSQL, for reconciliation to release the holds they left;
4. Redis (writer/settle.py): give back (or, refused for capacity, forfeit) the hold of every
   refused row (also of one refused by an earlier pass: a crash may have come between its
   commit and its release), re-assert the holds of the stored rows, and drop stored rows from
   their outbox;
5. commit the batch's Kafka offsets, synchronously.

A step that keeps failing past its budget raises RetriesExhausted and the writer stops without
committing: after a restart the batch comes again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from kernel.failpoints import failpoint
from shard_router import ShardRouter
from writer import metrics
from writer.batch import DeadLetter, E, Record, Row, parse
from writer.deadletter import DeadLetterProducer
from writer.errors import DeadLetterUndelivered
from writer.retry import Backoff, db_rejected, db_retriable, never, retrying
from writer.settle import Settler
from writer.sink import Sink, Written
from writer.source import EventSource
from writer.stream import Fate, Stream

if TYPE_CHECKING:  # the annotation only: with tracing off, OpenTelemetry is never imported
    from kernel.otel import Tracer

log = logging.getLogger(__name__)

_DEAD_LETTER_KINDS = {
    Fate.REFUSED: "refused",
    Fate.FAILED_BEFORE: "refused",
    Fate.CONFLICT: "refused",
    Fate.UNKNOWN_ITEM: "unknown_item",
    Fate.UNKNOWN_VOUCHER: "unknown_voucher",
    Fate.REJECTED: "rejected",
}


@dataclass(slots=True)
class WriterStats:
    """What one writer loop did; the benchmark reads it."""

    batches: int = 0
    messages: int = 0
    fates: dict[str, int] = field(default_factory=dict)  # rows, by fate
    dead_letters: int = 0
    first_batch_at: float | None = None  # time.monotonic()
    last_commit_at: float | None = None


class StreamWriter(Generic[E]):
    def __init__(
        self,
        source: EventSource,
        sink: Sink[E],
        deadletter: DeadLetterProducer,
        router: ShardRouter,
        *,
        backoff: Backoff | None = None,
        stats: WriterStats | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.source = source
        self.sink = sink
        self.stream: Stream[E, Any] = sink.stream  # one stream per loop: the sink's
        self.deadletter = deadletter
        self.router = router
        self.backoff = backoff or Backoff()
        self.settler = Settler(sink, router, self.backoff)
        self.stats = stats or WriterStats()
        self.tracer = tracer  # None: tracing off

    async def run(self, stop: asyncio.Event, *, once: bool = False) -> None:
        """Until ``stop`` is set; with ``once``, until the group has drained the topic."""
        while not stop.is_set():
            records = await self.source.poll_batch()
            if records:
                if self.tracer is None:
                    await self.handle(records)
                else:
                    await self._traced(self.tracer, records)
            elif once and await self.source.drained():
                return
            await self._refresh_lag()

    async def _traced(self, tracer: Tracer, records: Sequence[Record]) -> None:
        """One span per batch, linked to each message's purchase span (its traceparent)."""
        parents = [record.context().traceparent for record in records]
        with tracer.batch(records[0].topic, parents):
            await self.handle(records)

    async def handle(self, records: Sequence[Record]) -> None:
        if self.stats.first_batch_at is None:
            self.stats.first_batch_at = time.monotonic()
        metrics.BATCH_SIZE.observe(len(records))
        batch = parse(records, self.stream)
        written, rejected = await self._store(batch.rows)
        if batch.rows:
            failpoint(f"{self.stream.failpoints}.after_commit")
        letters = batch.dead_letters + rejected + _dead_letters(written)
        await self._dead_letter(letters)
        await self._record_dead_letters(batch.dead_letters)
        await self.settler.settle(written)
        await self.source.commit(batch.offsets)
        self._count(len(records), written, letters)
        self._log_each(written, letters)

    async def _store(self, rows: list[Row[E]]) -> tuple[Written[E], list[DeadLetter]]:
        """Store the batch; a batch PostgreSQL rejects outright is split to find the culprit."""
        try:
            return await self._write(rows), []
        except Exception as exc:
            if not db_rejected(exc):
                raise
            if len(rows) == 1:
                log.error("database rejected %s %s: %r", self.stream.noun, rows[0].order_id, exc)
                return await self._reject(rows[0], f"rejected by the database: {exc}"), []
            log.error("database rejected a batch of %d, storing one by one: %r", len(rows), exc)
        written: Written[E] = Written([], {})
        rejected: list[DeadLetter] = []
        for row in rows:
            one, bad = await self._store([row])
            written += one
            rejected += bad
        return written, rejected

    async def _reject(self, row: Row[E], reason: str) -> Written[E]:
        """The row the database refused: settled like any refusal that is not for capacity
        (its hold and unit given back, its outbox entry dropped, dead-lettered once), so that
        no relay sends it again and nothing counts it in flight."""

        async def attempt() -> Written[E]:
            return await self.sink.reject(row, reason)

        return await retrying("db", attempt, db_retriable, self.backoff)

    async def _write(self, rows: list[Row[E]]) -> Written[E]:
        async def attempt() -> Written[E]:
            started = time.perf_counter()
            written = await self.sink.write(rows)
            metrics.COMMIT_SECONDS.observe(time.perf_counter() - started)
            return written

        if not rows:
            return Written([], {})
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

    async def _record_dead_letters(self, letters: list[DeadLetter]) -> None:
        """Undecodable, unsupported and invalid events: no row to store, so their orderIds are
        recorded for reconciliation to release the holds they left (before the offsets are
        committed: a crash before it redelivers the batch)."""
        if not letters:
            return

        async def attempt() -> None:
            await self.sink.record_dead_letters(letters)

        await retrying("db", attempt, db_retriable, self.backoff)

    async def _refresh_lag(self) -> None:
        # Local to librdkafka (position and the high watermark of the last fetch): cheap.
        metrics.set_lag(await self.source.lags())

    def _count(self, messages: int, written: Written[E], letters: list[DeadLetter]) -> None:
        self.stats.batches += 1
        self.stats.messages += messages
        self.stats.dead_letters += len(letters)
        self.stats.last_commit_at = time.monotonic()
        fates = Counter(d.fate.value for d in written.decisions)
        for fate, n in fates.items():
            self.stream.metric.labels(fate).inc(n)
            self.stats.fates[fate] = self.stats.fates.get(fate, 0) + n
        unusual = letters or fates.keys() - {Fate.INSERTED.value}
        plural = f"{self.stream.noun}s"
        described = ", ".join(f"{n} {plural} {fate}" for fate, n in sorted(fates.items()))
        log.log(
            logging.INFO if unusual else logging.DEBUG,
            "batch of %d: %s, %d dead letters",
            messages,
            described or f"no {plural}",
            len(letters),
        )

    def _log_each(self, written: Written[E], letters: list[DeadLetter]) -> None:
        """One line per dead letter (INFO) and per stored row (DEBUG: a sale's worth of orders
        at INFO would drown everything else), each naming the request id and trace id it
        came with, so one purchase can be followed from the gateway's answer to here."""
        for letter in letters:
            _log_record(logging.INFO, letter.record, f"dead-lettered ({letter.kind})")
        if log.isEnabledFor(logging.DEBUG):
            lettered = {id(letter.record) for letter in letters}
            for d in written.decisions:
                if id(d.row.record) not in lettered:
                    _log_record(logging.DEBUG, d.row.record, f"{self.stream.noun} {d.fate.value}")


def _log_record(level: int, record: Record, what: str) -> None:
    context = record.context()
    order_id = (record.key or b"").decode("utf-8", errors="backslashreplace")
    if not order_id.isprintable():
        order_id = repr(order_id)  # whoever wrote the topic wrote it: one line, escaped
    fields = {**context.log_fields(), "order_id": order_id}
    trace = f", trace {fields['trace_id']}" if "trace_id" in fields else ""
    log.log(level, "%s %s: request %s%s", order_id, what, context.request_id, trace, extra=fields)


def _dead_letters(written: Written[E]) -> list[DeadLetter]:
    return [
        DeadLetter(d.row.record, _DEAD_LETTER_KINDS[d.fate], d.reason)
        for d in written.decisions
        if d.fate in _DEAD_LETTER_KINDS
    ]
