"""Prometheus metrics of one gateway process (each granian worker keeps its own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry()

REQUESTS = Counter(
    "flashsale_requests_total",
    "Requests by route and outcome",
    ["route", "outcome"],
    registry=REGISTRY,
)
RESERVATION_SECONDS = Histogram(
    "flashsale_reservation_seconds",
    "Redis reservation + Kafka acknowledgement latency",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
SOLD_OUT_FLAG_HITS = Counter(
    "flashsale_sold_out_flag_hits_total",
    "410s answered from the local flag with no I/O",
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "flashsale_rate_limited_total",
    "Requests refused by a token bucket",
    ["scope"],
    registry=REGISTRY,
)
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

# Pre-bound children: the hot path must not pay for a label lookup.
PURCHASE = {
    outcome: REQUESTS.labels("purchase", outcome)
    for outcome in (
        "accepted",
        "replayed",
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
}
USER_LIMITED = RATE_LIMITED.labels("user")
IP_LIMITED = RATE_LIMITED.labels("ip")


def exposition() -> bytes:
    return generate_latest(REGISTRY)
