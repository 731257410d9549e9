"""The order writer: batches of OrderPlaced events from Kafka into PostgreSQL, one transaction
per batch, idempotent by orderId; refused orders and poison go to the dead-letter topic."""

from .app import main, run
from .batch import Batch, DeadLetter, Order, Record, parse
from .consumer import OrderWriter, WriterStats
from .errors import RetriesExhausted, WriterError
from .metrics import METRICS_PORT
from .sink import Decision, Fate, Sink, SinkResult

__all__ = [
    "METRICS_PORT",
    "Batch",
    "DeadLetter",
    "Decision",
    "Fate",
    "Order",
    "OrderWriter",
    "Record",
    "RetriesExhausted",
    "Sink",
    "SinkResult",
    "WriterError",
    "WriterStats",
    "main",
    "parse",
    "run",
]
