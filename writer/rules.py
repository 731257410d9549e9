"""Pure: decide each row of a batch from what its transaction read under the locks (steps 2 and 3
of writer/sink.py), by the same rules for orders and voucher uses.

A row is known by its identity (the orderId; a voucher use by (code, orderId)). One seen earlier
in the batch is a duplicate; one already stored is a duplicate (active or not), a failure
reported again (stored FAILED: its hold is given back again) or, where the stream says so, a
conflict. A new row is refused when its buyer already holds ``per_buyer`` active rows of the
target, or when the target has no capacity left (``capacity - taken``): that refusal forfeits
its hold, since Redis granted a unit the database did not have. Otherwise it is accepted, which
counts for the rows after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from writer.batch import E, Row
from writer.stream import Decision, Fate, Locked, Stream


@dataclass(slots=True)
class _Target:
    capacity: int
    taken: int
    per_buyer: int


def decide(
    stream: Stream[E, Any],
    rows: Sequence[Row[E]],
    locked: Locked,
    stored: Mapping[Any, Mapping[str, Any]],  # by identity (Stream.stored_identity)
    active: Sequence[Mapping[str, Any]],
) -> list[Decision[E]]:
    targets = {
        key: _Target(at["capacity"], at["taken"], at["per_buyer"]) for key, at in locked.items()
    }
    holders: defaultdict[tuple[Hashable, int], set[str]] = defaultdict(set)
    for held_row in active:
        holders[(held_row["target"], held_row["buyer"])].add(str(held_row["holder"]))
    decisions: list[Decision[E]] = []
    seen: set[Hashable] = set()
    for row in rows:
        identity = stream.identity(row)
        target = targets.get(row.target)
        held = holders[(row.target, row.buyer)]
        if identity in seen:
            decisions.append(Decision(row, Fate.DUPLICATE))
        elif (was := stored.get(identity)) is not None:
            decisions.append(_again(stream, row, was))
        elif target is None:
            decisions.append(Decision(row, stream.unknown, stream.unknown_reason(row)))
        elif len(held) >= target.per_buyer:
            reason = stream.held_reason(row, held, target.per_buyer)
            decisions.append(Decision(row, Fate.REFUSED, reason))
        elif target.taken >= target.capacity:
            reason = stream.exhausted_reason(row, target.capacity)
            decisions.append(Decision(row, Fate.REFUSED, reason, forfeit=True))
        else:
            target.taken += 1
            held.add(row.order_id)
            decisions.append(Decision(row, Fate.INSERTED, active=True))
        seen.add(identity)
    return decisions


def _again(stream: Stream[E, Any], row: Row[E], stored: Mapping[str, Any]) -> Decision[E]:
    """A row whose identity is stored already: a redelivery, or another row under it."""
    if (conflict := stream.conflict(row, stored)) is not None:
        return Decision(row, Fate.CONFLICT, conflict)
    if stored["status"] == "FAILED":
        reason = stored["failure_reason"] or ""
        return Decision(row, Fate.FAILED_BEFORE, reason, forfeit=stream.forfeits(reason))
    return Decision(row, Fate.DUPLICATE, active=stored["status"] in stream.schema.holding)
