"""The batched sink's SQL, written once for both streams: a stream only names its tables and
columns (Schema), so the lock order, the idempotent insert and the capacity guard are the same
text for orders and voucher uses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Schema:
    """Where a stream's rows go, and the table that counts them (items, vouchers)."""

    table: str
    # Its columns as "name type, ...": the orderId, the target and the buyer, then those of
    # Row.rest in order (status and failure_reason follow).
    columns: str
    accepted: str  # the status an accepted row is stored with (a refused one: FAILED)
    holding: tuple[str, ...]  # the statuses of active rows, that hold the buyer's place
    conflict: str  # the conflicts that skip a row: "" for any, or a column list "(order_id)"
    counter: str  # the table that counts them, one row per target, and its key column
    counter_key: str
    taken: str  # its count of accepted rows, which never passes its capacity
    capacity: str
    per_buyer: str  # an expression over the counting row: active rows one buyer may hold
    # True: an orderId is unique per target, a row is known by (target, orderId) (a voucher
    # use: one order may carry several vouchers); False: by its orderId alone (an order).
    per_target: bool = False
    place: str = "NULL"  # the column naming where its unit is held in Redis (an item's shard)


@dataclass(frozen=True, slots=True)
class Statements:
    """Parameters bound and columns read by writer/sink.py.

    lock: $1 targets -> the counting rows (FOR UPDATE in key order) with target, capacity,
        taken, per_buyer
    stored: $1 keys (per_target: $1 targets, $2 keys) -> the stored rows with those identities,
        with order_key and order_target
    active: $1 targets, $2 buyers -> target, buyer, holder: each of those buyers' active rows
    insert: one array per column, then status and failure_reason; RETURNING one row per row
        inserted
    advance: $1 targets, $2 counts, guarded by taken + n <= capacity; RETURNING one per target
    holders: $1 targets -> order_id (text), target, buyer, place: every active row of them
    still_active: $1 targets, $2 orderIds (text) -> order_id of those rows still active
    """

    lock: str
    stored: str
    active: str
    insert: str
    advance: str
    holders: str
    still_active: str


def statements(s: Schema) -> Statements:
    columns = [column.split() for column in s.columns.split(",")]
    (key, key_type), (target, target_type), (buyer, buyer_type) = columns[:3]
    names = ", ".join(name for name, _ in columns)
    arrays = ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(columns, 1))
    status, reason = len(columns) + 1, len(columns) + 2
    conflict = f" {s.conflict}" if s.conflict else ""
    holding = ", ".join(f"'{name}'" for name in s.holding)
    if s.per_target:
        identities = f"""({target}, {key}) IN (
    SELECT * FROM unnest($1::{target_type}[], $2::{key_type}[]))"""
    else:
        identities = f"{key} = ANY($1::{key_type}[])"
    return Statements(
        lock=f"""
SELECT *, {s.counter_key} AS target, {s.capacity} AS capacity, {s.taken} AS taken,
       {s.per_buyer} AS per_buyer
FROM {s.counter} WHERE {s.counter_key} = ANY($1::{target_type}[])
ORDER BY {s.counter_key} FOR UPDATE
""",
        stored=f"""
SELECT *, {key} AS order_key, {target} AS order_target FROM {s.table} WHERE {identities}
""",
        active=f"""
SELECT r.{target} AS target, r.{buyer} AS buyer, r.{key} AS holder FROM {s.table} AS r
JOIN (SELECT DISTINCT * FROM unnest($1::{target_type}[], $2::{buyer_type}[])) AS k(target, buyer)
  ON r.{target} = k.target AND r.{buyer} = k.buyer
WHERE r.status IN ({holding})
""",
        insert=f"""
INSERT INTO {s.table} ({names}, status, failure_reason)
SELECT * FROM unnest({arrays}, ${status}::text[], ${reason}::text[])
ON CONFLICT{conflict} DO NOTHING
RETURNING {key}
""",
        advance=f"""
UPDATE {s.counter} AS c SET {s.taken} = c.{s.taken} + d.n
FROM unnest($1::{target_type}[], $2::integer[]) AS d(target, n)
WHERE c.{s.counter_key} = d.target AND c.{s.taken} + d.n <= c.{s.capacity}
RETURNING c.{s.counter_key}
""",
        holders=f"""
SELECT {key}::text AS order_id, {target} AS target, {buyer} AS buyer, {s.place} AS place
FROM {s.table} WHERE {target} = ANY($1::{target_type}[]) AND status IN ({holding})
""",
        still_active=f"""
SELECT {key}::text AS order_id, {target} AS target FROM {s.table}
WHERE ({target}, {key}) IN (SELECT * FROM unnest($1::{target_type}[], $2::text[]::{key_type}[]))
  AND status IN ({holding})
""",
    )
