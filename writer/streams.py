"""The writer's two streams, declared once, side by side: the orders topic (OrderPlaced events
become flash_sale_order rows) and the vouchers topic (VoucherReserved events, the flash voucher
uses Redis granted, become voucher_redemption rows).

What the two differ in is data: one line per particular, a column per stream, so a difference
reads across one line and a particular is given to both streams or to neither. The logic is
written once against it (writer/stream.py and the sink, rules, loop and settling it names); what
each stream does its own way, its rows' checks and its Redis calls, is its hooks class
(writer/orders.py, writer/vouchers.py).
"""

from __future__ import annotations

from typing import Any, Final

from domain import order_lifecycle, voucher_lifecycle
from domain.voucher_arm import OUT_OF_STOCK
from kernel.events import OrderPlaced, VoucherReserved
from writer import metrics, orders, vouchers
from writer.orders import OrderStream
from writer.sql import Schema
from writer.vouchers import VoucherStream

# A particular's values: (orders, vouchers). The dataclasses built from a column refuse a
# particular missing or unknown, at import.
Table = dict[str, tuple[Any, Any]]

# fmt: off
# Where each stream's rows go, and what counts them (writer/sql.py's Schema).
_SCHEMAS: Final[Table] = {
    "table":       ("flash_sale_order",         "voucher_redemption"),
    "columns":     (orders.COLUMNS,             vouchers.COLUMNS),
    "accepted":    ("PENDING",                  "RESERVED"),
    "holding":     (order_lifecycle.ACTIVE,     voucher_lifecycle.ACTIVE),
    "conflict":    ("",                         "(voucher_code, order_id)"),  # "": any conflict
    "counter":     ("flash_sale_item",          "voucher"),
    "counter_key": ("id",                       "code"),
    "taken":       ("sold",                     "used_count"),
    "capacity":    ("quantity",                 "total_limit"),
    # flash_sale_order_one_active holds an order's 1 too
    "per_buyer":   ("1",                        "per_customer_limit"),
    # unique (voucher_code, order_id): migrations/0003
    "per_target":  (False,                      True),
    "place":       ("shard",                    "NULL"),  # a use is held on no shard
}

# What the writer calls each stream and its rows, and counts and refuses them by (Stream).
_STREAMS: Final[Table] = {
    "name":        ("orders",                   "vouchers"),  # FLASHSALE_WRITER_STREAMS' words
    "noun":        ("order",                    "voucher use"),
    "event":       (OrderPlaced,                VoucherReserved),
    "target_noun": ("item",                     "voucher"),
    "unit":        ("unit",                     "use"),
    "metric":      (metrics.ORDERS,             metrics.VOUCHER_USES),
    "failpoints":  ("writer",                   "writer.vouchers"),
    "exhausted":   (order_lifecycle.SOLD_OUT,   OUT_OF_STOCK),
}
# fmt: on


def _column(table: Table, stream: int) -> dict[str, Any]:
    return {particular: values[stream] for particular, values in table.items()}


def _particulars(stream: int) -> dict[str, Any]:
    """Column ``stream`` of both tables: that stream's fields, its schema among them."""
    return {**_column(_STREAMS, stream), "schema": Schema(**_column(_SCHEMAS, stream))}


ORDERS: Final = OrderStream(**_particulars(0))
VOUCHERS: Final = VoucherStream(**_particulars(1))
