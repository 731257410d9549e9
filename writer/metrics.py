"""Prometheus metrics of one writer process, served by ``serve(port)``."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from writer.errors import WriterError

log = logging.getLogger(__name__)

METRICS_PORT = 9108

REGISTRY = CollectorRegistry()

BATCH_SIZE = Histogram(
    "flashsale_writer_batch_size",
    "Kafka messages per batch",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000),
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "flashsale_writer_commit_seconds",
    "Latency of one batch's PostgreSQL transaction, commit included",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "flashsale_writer_consumer_lag",
    "Messages behind the high watermark, per assigned partition",
    ["topic", "partition"],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "flashsale_writer_dead_letters_total",
    "Messages sent to the dead-letter topic, by kind",
    ["kind"],
    registry=REGISTRY,
)
ORDERS = Counter(
    "flashsale_writer_orders_total",
    "Orders handled, by fate (inserted, duplicate, refused, failed_before, unknown_item)",
    ["fate"],
    registry=REGISTRY,
)
VOUCHER_USES = Counter(
    "flashsale_writer_voucher_uses_total",
    "Flash voucher uses handled, by fate (inserted, duplicate, refused, failed_before, conflict,"
    " unknown_voucher)",
    ["fate"],
    registry=REGISTRY,
)
REASSERTED = Counter(
    "flashsale_writer_reasserted_total",
    "Holds (part: hold) and buyers' dedup entries (part: buyer) of stored rows that Redis had"
    " forgotten (a failover), written back by the writer, by stream and outcome: restored (a"
    " unit taken with it), unbacked (the stock was 0: written without one)",
    ["stream", "part", "outcome"],
    registry=REGISTRY,
)
FORFEITED = Counter(
    "flashsale_writer_forfeited_total",
    "Holds of rows refused for capacity, dropped without giving their unit back, by stream",
    ["stream"],
    registry=REGISTRY,
)
RETRIES = Counter(
    "flashsale_writer_retries_total",
    "Retried attempts of a step (db, deadletter, redis)",
    ["step"],
    registry=REGISTRY,
)


def set_lag(lags: dict[tuple[str, int], int]) -> None:
    for (topic, partition), lag in lags.items():
        CONSUMER_LAG.labels(topic, str(partition)).set(lag)


def forget_partitions(places: list[tuple[str, int]]) -> None:
    """Drop the lag series of partitions this process no longer owns."""
    for topic, partition in places:
        try:
            CONSUMER_LAG.remove(topic, str(partition))
        except KeyError:
            pass


def serve(port: int, host: str = "127.0.0.1") -> WSGIServer:
    """Serve /metrics on ``port`` (0 picks a free one) from a daemon thread until shut down."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        # A busy port is this host's configuration, not the stack being down: say which.
        raise WriterError(
            f"cannot serve writer metrics on {host}:{port}: {exc.strerror or exc}; choose "
            "another port with FLASHSALE_WRITER_METRICS_PORT (0 picks a free one, -1 serves none)"
        ) from exc
    log.info("writer metrics on :%d/metrics", server.server_port)
    return server
