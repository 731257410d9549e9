"""The writer's batch span (kernel/otel.py): the real StreamWriter loop with its source faked
and its batch handling replaced by a probe, so no stack is needed; the SDK's in-memory
exporter. Tracing on: one span per batch, current while the batch is handled, linked to every
message that carried a valid traceparent; off: the batch is handled with no span."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kernel.otel import Tracer
from kernel.request_context import kafka_headers
from writer.batch import Record
from writer.consumer import StreamWriter

FIRST = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SECOND = "00-11111111111111111111111111111111-2222222222222222-01"
TOPIC = "flashsale.orders"


class _Source:
    """One batch, then the loop is stopped."""

    def __init__(self, records: list[Record], stop: asyncio.Event) -> None:
        self.batches = [records]
        self.stop = stop

    async def poll_batch(self) -> list[Record]:
        if not self.batches:
            self.stop.set()
            return []
        return self.batches.pop()

    async def lags(self) -> dict[tuple[str, int], int]:
        return {}


class _Sink:
    stream = cast(Any, None)


def _record(offset: int, headers: Any) -> Record:
    return Record(TOPIC, 0, offset, f"o-{offset}".encode(), b"{}", headers)


def _run(tracer: Tracer | None) -> list[tuple[int, trace.SpanContext]]:
    """The batch sizes handled, each with the span current while it was."""
    stop = asyncio.Event()
    records = [
        _record(0, kafka_headers("o-0", FIRST)),
        _record(1, kafka_headers("o-1", None)),  # no trace context: no link
        _record(2, [("traceparent", b"garbage")]),  # malformed: ignored
        _record(3, kafka_headers("o-3", SECOND)),
    ]
    writer = StreamWriter(
        cast(Any, _Source(records, stop)),
        cast(Any, _Sink()),
        cast(Any, None),
        cast(Any, None),
        tracer=tracer,
    )
    handled: list[tuple[int, trace.SpanContext]] = []

    async def handle(batch: Sequence[Record]) -> None:
        handled.append((len(batch), trace.get_current_span().get_span_context()))

    writer.handle = handle  # type: ignore[method-assign,assignment]
    asyncio.run(writer.run(stop))
    return handled


def test_on_a_batch_is_one_span_linked_to_each_message_s_purchase() -> None:
    spans = InMemorySpanExporter()
    ((size, current),) = _run(Tracer(SimpleSpanProcessor(spans), "flashsale-writer"))
    (span,) = spans.get_finished_spans()
    assert size == 4 and current == span.context  # the batch was handled inside it
    assert span.name == f"process {TOPIC}" and span.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (int("0af7651916cd43dd8448eb211c80319c", 16), int("b7ad6b7169203331", 16)),
        (int("1" * 32, 16), int("2" * 16, 16)),
    ]
    assert span.attributes is not None
    assert span.attributes["messaging.batch.message_count"] == 4
    assert span.resource.attributes["service.name"] == "flashsale-writer"


def test_off_the_batch_is_handled_without_a_span() -> None:
    ((size, current),) = _run(None)
    assert size == 4 and not current.is_valid
