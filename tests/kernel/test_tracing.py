"""Tracing (kernel/tracing.py, kernel/otel.py): off by default, and then nothing of
OpenTelemetry is imported by the gateway's or the writer's code; on, the purchase span's parent
is the request's traceparent and the traceparent it hands on is its own; a writer's batch span
links to each message's. Spans from the SDK's in-memory exporter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kernel import tracing
from kernel.otel import Tracer
from kernel.settings import PROJECT_ROOT, load_settings

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = int("0af7651916cd43dd8448eb211c80319c", 16)

# Imports every module of the gateway and the writer (gateway.asgi builds the app, as granian's
# worker does) and starts tracing as their processes do, recording each import of an
# OpenTelemetry module the project's own code asks for. BLOCK: every OpenTelemetry import fails,
# as where the extra is not installed (redis-py then goes without its own optional metrics,
# which import opentelemetry where it is installed: not ours to count). Prints the tracer's
# type (or the exit message) and those imports.
_PROBE = """
import importlib, pkgutil, sys
OURS = ("gateway", "writer", "kernel", "domain", "shard_router", "flashsale")
BLOCK = sys.argv[1] == "block"
seen = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "opentelemetry":
            return None
        frame = sys._getframe(1)
        while frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
            frame = frame.f_back
        importer = frame.f_globals.get("__name__", "")
        if importer.split(".")[0] in OURS:
            seen.append(f"{importer}:{name}")
        if BLOCK:
            raise ModuleNotFoundError(f"no module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Watch())
import gateway, writer
for package in (gateway, writer):
    for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
from kernel import tracing
from kernel.settings import settings
try:
    shown = type(tracing.start(settings(), "probe")).__name__
except SystemExit as exc:
    shown = str(exc)
print(shown, sorted(set(seen)))
"""


def _probe(exporter: str | None, *, block: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "FLASHSALE_OTEL_EXPORTER"}
    if exporter is not None:
        env["FLASHSALE_OTEL_EXPORTER"] = exporter
    env["FLASHSALE_ENV"] = "local"  # the development secrets: gateway.asgi builds the app
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "block" if block else "allow"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_off_by_default_the_gateway_and_writer_import_nothing_of_opentelemetry() -> None:
    assert _probe(None, block=True) == "NoneType []"
    assert _probe("none", block=True) == "NoneType []"
    assert _probe(None, block=False) == "NoneType []"


def test_on_only_kernel_otel_imports_it_and_without_the_extra_start_up_says_so() -> None:
    shown = _probe("console", block=False)  # the probe sees an import when there is one
    assert shown.startswith("Tracer ["), shown
    imports = shown.removeprefix("Tracer ").strip("[]").split(", ")
    assert "'kernel.otel:opentelemetry.sdk.trace'" in imports
    assert all(seen.startswith("'kernel.otel:") for seen in imports), imports
    refused = _probe("console", block=True)
    assert refused.startswith(
        "FLASHSALE_OTEL_EXPORTER=console: needs the otel extra (pip install '.[otel]')"
    ), refused


def test_the_setting_is_validated() -> None:
    with pytest.raises(SystemExit, match="FLASHSALE_OTEL_EXPORTER='jaeger': one of none, otlp"):
        load_settings({"FLASHSALE_OTEL_EXPORTER": "jaeger"})
    assert load_settings({"FLASHSALE_OTEL_EXPORTER": "otlp"}).otel_exporter == "otlp"
    assert load_settings({}).otel_exporter == "none"
    assert tracing.start(load_settings({}), "x") is None


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(spans: InMemorySpanExporter) -> Tracer:
    return Tracer(SimpleSpanProcessor(spans), "flashsale-test")


def test_a_purchase_span_continues_the_incoming_trace_and_hands_on_its_own(
    tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    with tracer.purchase(INCOMING, 12) as span:
        handed_on = span.traceparent
        span.answered(202)
    (done,) = spans.get_finished_spans()
    assert done.parent is not None and done.parent.span_id == int("b7ad6b7169203331", 16)
    assert done.context.trace_id == TRACE_ID
    assert handed_on == f"00-{TRACE_ID:032x}-{done.context.span_id:016x}-01"
    assert done.attributes is not None
    assert done.attributes["flashsale.item_id"] == 12
    assert done.attributes["http.response.status_code"] == 202
    assert done.resource.attributes["service.name"] == "flashsale-test"


def test_a_purchase_without_a_traceparent_starts_a_trace(
    tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    with tracer.purchase(None, 12):
        pass
    (done,) = spans.get_finished_spans()
    assert done.parent is None and done.context.trace_id != TRACE_ID


def test_a_batch_span_links_to_each_message_s_purchase(
    tracer: Tracer, spans: InMemorySpanExporter
) -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-01"
    with tracer.batch("flashsale.orders", [INCOMING, None, other]):
        pass
    (done,) = spans.get_finished_spans()
    assert done.name == "process flashsale.orders"
    assert done.parent is None  # its own trace: a batch has many parents
    linked = [(link.context.trace_id, link.context.span_id) for link in done.links]
    assert linked == [
        (TRACE_ID, int("b7ad6b7169203331", 16)),
        (int("1" * 32, 16), int("2" * 16, 16)),
    ]
    assert done.attributes is not None
    assert done.attributes["messaging.batch.message_count"] == 3
