"""A real OpenTelemetry collector for a test: Jaeger (github.com/jaegertracing/jaeger, built from
the Go module proxy into .venv/bin by ``scripts/bootstrap``), spans kept in memory, its
OTLP/HTTP receiver and its query API on free loopback ports, read back through the query API's
JSON (``/api/traces``). No tests here."""

from __future__ import annotations

import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from flashsale.stack.processes import http_ready, port_open, process_group, wait_ready
from rig.ports import free_port

JAEGER = shutil.which("jaeger") or str(Path(sys.executable).parent / "jaeger")
READY_TIMEOUT_S = 60.0  # a cold start on a loaded 2-core machine

# The all-in-one's pipeline, cut to what a test needs: OTLP/HTTP in, memory storage, the query
# API; the collector's own metrics off (they would listen on a fixed port).
_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"""

# The query API is on loopback: a proxy from the environment must not answer for it.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, slots=True)
class Jaeger:
    otlp: str  # the OTLP/HTTP base URL: OTEL_EXPORTER_OTLP_ENDPOINT for the SDK
    query: str  # the query API's base URL

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans stored under ``trace_id`` (32 hex digits); none while it is unknown."""
        return _spans(self._get(f"/api/traces/{trace_id}"))

    def spans(self, service: str, operation: str) -> list[dict[str, Any]]:
        """Every stored span of ``service`` named ``operation``, from the last hour."""
        query = urllib.parse.urlencode(
            {"service": service, "operation": operation, "lookback": "1h", "limit": 100}
        )
        return _spans(self._get(f"/api/traces?{query}"))

    def _get(self, path: str) -> list[dict[str, Any]]:
        try:
            with _direct.open(self.query + path, timeout=5) as response:
                body: dict[str, Any] = msgspec.json.decode(response.read())
        except urllib.error.HTTPError as error:
            error.close()
            if error.code == 404:  # not stored yet
                return []
            raise
        return body["data"] or []


def _spans(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The traces' spans, each with its ``serviceName`` (Jaeger keeps it in the trace's
    ``processes``)."""
    return [
        {**span, "serviceName": trace["processes"][span["processID"]]["serviceName"]}
        for trace in traces
        for span in trace["spans"]
    ]


@contextmanager
def running_jaeger(workdir: Path) -> Iterator[Jaeger]:
    """Jaeger for the block, its config and log in ``workdir``; yields once both its OTLP
    receiver and its query API listen."""
    taken: set[int] = set()
    otlp, query, query_grpc = (free_port(taken) for _ in range(3))
    config = workdir / "jaeger.yaml"
    config.write_text(_CONFIG.format(otlp=otlp, query=query, query_grpc=query_grpc))
    log = workdir / "jaeger.log"
    with process_group([JAEGER, "--config", str(config)], log=log) as proc:
        started = Jaeger(f"http://127.0.0.1:{otlp}", f"http://127.0.0.1:{query}")
        services = http_ready(f"{started.query}/api/services")

        def ready() -> bool:
            return port_open(f"127.0.0.1:{otlp}") and services()

        wait_ready(proc, ready, READY_TIMEOUT_S, "jaeger", log)
        yield started
