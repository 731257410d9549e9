"""The order writer: batches of OrderPlaced events from Kafka into PostgreSQL, one transaction
per batch, idempotent by orderId; refused orders and poison go to the dead-letter topic."""

from writer.app import main, run
from writer.batch import Batch, DeadLetter, Order, Record, parse
from writer.consumer import OrderWriter, WriterStats
from writer.errors import RetriesExhausted, WriterError
from writer.metrics import METRICS_PORT
from writer.sink import Decision, Fate, Sink, SinkResult

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
