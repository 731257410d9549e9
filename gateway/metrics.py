"""Prometheus metrics of one gateway process (each granian worker keeps its own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gateway.hot_counters import HotCounter, HotHistogram

REGISTRY = CollectorRegistry()

SHED = Counter("flashsale_shed_total", "Requests shed by the in-flight cap", registry=REGISTRY)
SHARD_STOCK = Gauge(
    "flashsale_shard_stock",
    "Units left per shard, as last seen",
    ["item", "shard"],
    registry=REGISTRY,
)
RELAYED = Counter(
    "flashsale_outbox_relayed_total", "Outbox entries re-sent by the relay", registry=REGISTRY
)
OUTBOX_ENTRIES = Gauge(
    "flashsale_outbox_entries",
    "Entries the last relay round found in the outboxes it visited (all of them while there are"
    " at most outbox_relay_scan_budget), in flight or waiting for a re-send, by topic",
    ["topic"],
    registry=REGISTRY,
)

VOUCHER_RESERVATIONS = Counter(
    "flashsale_voucher_reservations_total",
    "Voucher reserve answers by kind (flash, ordinary) and outcome",
    ["kind", "outcome"],
    registry=REGISTRY,
)
VOUCHER_TRANSITIONS = Counter(
    "flashsale_voucher_transitions_total",
    "Voucher confirm and release answers by action and outcome",
    ["action", "outcome"],
    registry=REGISTRY,
)
VOUCHER_REMAINING = Gauge(
    "flashsale_voucher_remaining",
    "Uses left in Redis per flash voucher, as last seen",
    ["code"],
    registry=REGISTRY,
)
VOUCHER_OUT_OF_STOCK_FLAG_HITS = Counter(
    "flashsale_voucher_out_of_stock_flag_hits_total",
    "Flash voucher 409 OUT_OF_STOCK answered from the local flag with no I/O",
    registry=REGISTRY,
)

# The purchase hot path counts with plain ints (see hot_counters.py): a 98%-sold-out spike
# must not pay a mutex per request.
PURCHASE_OUTCOMES = HotCounter(
    "flashsale_purchase_requests_total",
    "Purchase requests by outcome (sold_out_flag: answered 410 from the local flag, no I/O)",
    ("outcome",),
    [
        (outcome,)
        for outcome in (
            "accepted",
            "already_purchased",
            "sold_out",
            "sold_out_flag",
            "unauthorized",
            "item_not_found",
            "sale_not_open",
            "rate_limited",
            "unavailable",
            "bad_request",
        )
    ],
)
PURCHASE_GUARDS = HotCounter(
    "flashsale_purchase_guard_hits_total",
    "Purchase requests stopped by a guard before Redis: sold-out flag, per-user and per-IP "
    "token buckets, in-flight cap, Kafka unable to acknowledge",
    ("guard",),
    [
        ("sold_out_flag",),
        ("rate_limit_user",),
        ("rate_limit_ip",),
        ("inflight_cap",),
        ("kafka_unavailable",),
    ],
)
RESERVATION_SECONDS = HotHistogram(
    "flashsale_reservation_seconds",
    "Redis reservation + Kafka acknowledgement latency",
    (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
REGISTRY.register(RESERVATION_SECONDS)
# Every 410 from the flag is also a guard hit: counted once, exported in both series.
PURCHASE_GUARDS.mirror(("sold_out_flag",), PURCHASE_OUTCOMES, ("sold_out_flag",))
REGISTRY.register(PURCHASE_OUTCOMES)
REGISTRY.register(PURCHASE_GUARDS)


def exposition() -> bytes:
    return generate_latest(REGISTRY)
