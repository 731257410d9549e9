"""OpenTelemetry spans (the ``otel`` extra; loaded only by kernel/tracing.py when it is on).

Two spans, each the one place its process's work for a purchase is timed:
- ``purchase`` in the gateway, around the reservation and the Kafka acknowledgement (the part
  that reaches Redis and Kafka; the refusals before it are counted in /metrics, not traced). Its
  parent is the request's W3C traceparent when it came with a valid one; its own traceparent is
  what the Kafka message's header carries on (kernel/request_context.py).
- ``process TOPIC`` in the writer, around one batch: a new trace, linked to the span of every
  message of the batch that carried a traceparent (a batch has many parents: links, as
  OpenTelemetry's messaging conventions have it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
PURCHASE_ROUTE = "/api/flash-sales/items/{itemId}/purchase"


class Span:
    """A running span, as its callers use it."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    @property
    def traceparent(self) -> str:
        """This span as the parent of what comes next (the Kafka header)."""
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, trace.set_span_in_context(self._span))
        return carrier["traceparent"]

    def answered(self, status: int) -> None:
        self._span.set_attribute("http.response.status_code", status)


class Tracer:
    """One process's spans, through its own provider (no global state: a test makes its own)."""

    def __init__(self, processor: SpanProcessor, service: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("flashsale")

    @contextmanager
    def purchase(self, parent: str | None, item_id: int) -> Iterator[Span]:
        """``parent``: the request's traceparent, validated (None: a new trace)."""
        with self._tracer.start_as_current_span(
            "POST " + PURCHASE_ROUTE,
            context=None if parent is None else _W3C.extract({"traceparent": parent}),
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": "POST",
                "http.route": PURCHASE_ROUTE,
                "flashsale.item_id": item_id,
            },
            # A 409 or 410 is an answer, not an error: the status code says which it was.
            set_status_on_exception=False,
        ) as span:
            yield Span(span)

    @contextmanager
    def batch(self, topic: str, parents: Sequence[str | None]) -> Iterator[Span]:
        """A batch of ``topic``; ``parents``: each message's traceparent, validated, or None."""
        links = [Link(_span_context(p)) for p in parents if p is not None]
        with self._tracer.start_as_current_span(
            f"process {topic}",
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root of its own
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.destination.name": topic,
                "messaging.batch.message_count": len(parents),
            },
        ) as span:
            yield Span(span)

    def close(self) -> None:
        """Export what is queued, then stop."""
        self.provider.shutdown()


def _span_context(parent: str) -> trace.SpanContext:
    return trace.get_current_span(_W3C.extract({"traceparent": parent})).get_span_context()


def exporting(exporter: str, service: str) -> Tracer:
    """``exporter``: otlp (OTLP/HTTP; endpoint and headers from the SDK's OTEL_EXPORTER_OTLP_*
    variables) or console. Spans are exported in batches, off the request's path."""
    chosen: SpanExporter
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        chosen = OTLPSpanExporter()
    elif exporter == "console":
        chosen = ConsoleSpanExporter()
    else:
        raise ValueError(f"no such exporter: {exporter!r}")
    return Tracer(BatchSpanProcessor(chosen), service)
