"""One batch of a stream's rows (orders, or flash voucher uses) into PostgreSQL, in one
transaction, idempotent by orderId. The SQL is the stream's (its Schema: writer/streams.py);
the steps and their guards are the same for both.

Inside the transaction, in this order:

1. lock the batch's targets, items or vouchers (``FOR UPDATE``, in id or code order, as every
   other locker takes them, so none deadlock): the lock serialises every writer's capacity and
   per-buyer checks for a target;
2. a row already stored (by orderId; a voucher use by (code, orderId)) is a duplicate (a
   redelivery): nothing changes, except that a row stored ``FAILED`` earlier is reported again
   so its hold is given back again (idempotent), and that a voucher use stored for another
   customer is a conflict: no row, its hold is released;
3. walk the new rows in batch order: refuse one whose buyer already holds the per-buyer limit
   of active rows for the target (one order per item, ``per_customer_limit`` uses per voucher),
   or that finds no capacity left (``quantity - sold``, ``total_limit - used_count``); accept
   the rest (writer/rules.py);
4. insert accepted rows (PENDING orders, RESERVED uses) and refused ones ``FAILED`` with their
   reason (``ON CONFLICT DO NOTHING``; every row must come back, or someone raced us: retry);
5. advance ``sold`` (``used_count``) by the accepted count per target, guarded by
   ``sold + n <= quantity`` (``used_count + n <= total_limit``);
6. list the holds Redis must have (writer/settle.py re-asserts them): the batch's active rows,
   and every active row of a target that refused one, since a refusal means Redis granted
   what the database did not have: it may have forgotten any of that target's holds.

A crash anywhere before the commit leaves nothing; a redelivery after it finds every orderId
stored and decides the same, so any number of passes equals one clean pass.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

import asyncpg

from kernel.failpoints import failpoint
from writer.batch import DeadLetter, E, Row
from writer.errors import RaceLost
from writer.retry import db_rejected
from writer.rules import decide
from writer.sql import statements
from writer.stream import GIVEN_BACK, Decision, Fate, Holder, Locked, Stream

TRANSACTION_TIMEOUT_S = 30.0
ACQUIRE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Written(Generic[E]):
    """What the transaction decided, the target rows it locked, and the holds Redis must have
    now (step 6)."""

    decisions: list[Decision[E]]
    locked: Locked
    holders: list[Holder] = field(default_factory=list)

    def __add__(self, other: Written[E]) -> Written[E]:
        return Written(
            self.decisions + other.decisions,
            {**self.locked, **other.locked},
            self.holders + other.holders,
        )


_RECORD_DEAD_LETTER = """
insert into dead_lettered_event (stream, order_id, kind, reason) values ($1, $2, $3, $4)
on conflict (stream, order_id) do nothing
"""
_MAX_ORDER_ID = 64  # the column's CHECK: a longer key is nobody's orderId


def _order_id(key: bytes | None) -> str | None:
    """The orderId a Kafka key names, if it can name one (printable text, not too long)."""
    try:
        text = (key or b"").decode()
    except UnicodeDecodeError:
        return None
    return text if 0 < len(text) <= _MAX_ORDER_ID and text.isprintable() else None


class Sink(Generic[E]):
    def __init__(self, pool: asyncpg.Pool, stream: Stream[E, Any]) -> None:
        self.pool = pool
        self.stream = stream
        self.sql = statements(stream.schema)

    async def write(self, rows: Sequence[Row[E]]) -> Written[E]:
        """Store the batch in one transaction; raises (and stores nothing) on any failure."""
        if not rows:
            return Written([], {})
        async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
            async with self.pool.acquire(timeout=ACQUIRE_TIMEOUT_S) as conn:
                async with conn.transaction():
                    written = await self._write(conn, rows)
                    failpoint(f"{self.stream.failpoints}.before_commit")
        return written

    async def reject(self, row: Row[E], reason: str) -> Written[E]:
        """A row PostgreSQL refused outright (writer/consumer.py found it): stored FAILED with
        ``reason`` if the database takes that, else not stored; either way decided REJECTED,
        with its target's row read for the Redis calls that give its hold back."""
        async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
            async with self.pool.acquire(timeout=ACQUIRE_TIMEOUT_S) as conn:
                async with conn.transaction():
                    locked = {r["target"]: r for r in await conn.fetch(self.sql.lock, [row.target])}
                    values = (row.key, row.target, row.buyer, *row.rest, "FAILED", reason)
                    try:
                        async with conn.transaction():  # a savepoint: its refusal alone undone
                            await conn.fetch(self.sql.insert, *([v] for v in values))
                    except Exception as exc:
                        if not db_rejected(exc):
                            raise
        return Written([Decision(row, Fate.REJECTED, reason)], locked)

    async def record_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Remember, by the orderId of their Kafka key, the events dead-lettered with no row to
        store: the hold one left in Redis is then released by reconciliation, not left a ghost
        (migrations/0007_dead_lettered_event.sql). Idempotent: a batch may come again."""
        keyed = [(letter, _order_id(letter.record.key)) for letter in letters]
        values = [(self.stream.name, o, x.kind, x.reason) for x, o in keyed if o is not None]
        if not values:
            return
        async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
            await self.pool.executemany(_RECORD_DEAD_LETTER, values)

    async def ended(self, holders: Sequence[Holder]) -> list[Holder]:
        """Those of ``holders`` whose row is no longer active (ended since it was stored)."""
        if not holders:
            return []
        targets = [h.target for h in holders]
        order_ids = [h.order_id for h in holders]
        async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
            rows = await self.pool.fetch(self.sql.still_active, targets, order_ids)
        active = {(row["target"], row["order_id"]) for row in rows}
        return [h for h in holders if h.hold not in active]

    async def _write(self, conn: Any, rows: Sequence[Row[E]]) -> Written[E]:
        targets = sorted({row.target for row in rows})
        locked = {row["target"]: row for row in await conn.fetch(self.sql.lock, targets)}
        keys = [row.key for row in rows]
        by = [[row.target for row in rows], keys] if self.stream.schema.per_target else [keys]
        stored = {
            self.stream.stored_identity(row): row for row in await conn.fetch(self.sql.stored, *by)
        }
        buyers = [row.buyer for row in rows]
        active = await conn.fetch(self.sql.active, [row.target for row in rows], buyers)
        decisions = decide(self.stream, rows, locked, stored, active)
        await self._insert(conn, decisions)
        await self._advance(conn, decisions)
        return Written(decisions, locked, await self._holders(conn, decisions))

    async def _holders(self, conn: Any, decisions: list[Decision[E]]) -> list[Holder]:
        holders: dict[tuple[Any, str], Holder] = {}
        for d in decisions:
            if d.active:
                holder = self.stream.holder(d.row)
                holders[holder.hold] = holder
        refused = sorted({d.row.target for d in decisions if d.fate in GIVEN_BACK})
        if refused:
            for row in await conn.fetch(self.sql.holders, refused):
                h = Holder(row["order_id"], row["target"], row["buyer"], row["place"])
                holders.setdefault(h.hold, h)
        return list(holders.values())

    async def _insert(self, conn: Any, decisions: list[Decision[E]]) -> None:
        new = [d for d in decisions if d.fate in (Fate.INSERTED, Fate.REFUSED)]
        if not new:
            return
        accepted = self.stream.schema.accepted
        values = [
            (d.row.key, d.row.target, d.row.buyer, *d.row.rest)
            + (accepted if d.fate is Fate.INSERTED else "FAILED", d.reason or None)
            for d in new
        ]
        columns = [list(column) for column in zip(*values, strict=True)]
        inserted = await conn.fetch(self.sql.insert, *columns)
        if len(inserted) != len(new):
            # Every conflict was ruled out under the locks: a row that did not go in means one
            # written meanwhile by someone who does not take them (another writer, an ordinary
            # voucher reservation). Roll back and decide again.
            lost = f"{len(new) - len(inserted)} of {len(new)} {self.stream.noun}s"
            raise RaceLost(f"{lost} met a conflict")

    async def _advance(self, conn: Any, decisions: list[Decision[E]]) -> None:
        accepted = Counter(d.row.target for d in decisions if d.fate is Fate.INSERTED)
        if not accepted:
            return
        targets = sorted(accepted)
        advanced = await conn.fetch(self.sql.advance, targets, [accepted[t] for t in targets])
        if len(advanced) != len(targets):
            raise RaceLost("the capacity guard refused an advance checked under the row lock")
