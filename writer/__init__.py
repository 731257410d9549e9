"""The writer: batches of events from Kafka into PostgreSQL, one transaction per batch, idempotent
by orderId, one loop per stream (OrderPlaced from the orders topic, VoucherReserved from the
vouchers topic); refused rows and poison go to the dead-letter topic."""

from writer.app import main, run
from writer.batch import Batch, DeadLetter, Record, parse
from writer.consumer import StreamWriter, WriterStats
from writer.errors import RetriesExhausted, WriterError
from writer.metrics import METRICS_PORT
from writer.orders import Order
from writer.sink import Sink, Written
from writer.stream import Decision, Fate, Stream
from writer.streams import ORDERS, VOUCHERS
from writer.vouchers import Redemption

__all__ = [
    "METRICS_PORT",
    "ORDERS",
    "VOUCHERS",
    "Batch",
    "DeadLetter",
    "Decision",
    "Fate",
    "Order",
    "Record",
    "Redemption",
    "RetriesExhausted",
    "Sink",
    "Stream",
    "StreamWriter",
    "WriterError",
    "WriterStats",
    "Written",
    "main",
    "parse",
    "run",
]
