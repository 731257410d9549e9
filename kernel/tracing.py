"""Tracing's switch: FLASHSALE_OTEL_EXPORTER=none (the default) gives no tracer at all, and then
nothing of OpenTelemetry is imported; its callers hold None, so their hot path pays one
attribute check. Any other value loads kernel/otel.py (the ``otel`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.settings import Settings

if TYPE_CHECKING:  # the annotation only: importing it imports the SDK
    from kernel.otel import Tracer


def start(cfg: Settings, service: str) -> Tracer | None:
    """The process's tracer (``service``: its service.name), or None when tracing is off."""
    if cfg.otel_exporter == "none":
        return None
    try:
        from kernel import otel
    except ImportError as exc:
        raise SystemExit(
            f"FLASHSALE_OTEL_EXPORTER={cfg.otel_exporter}: needs the otel extra "
            f"(pip install '.[otel]'): {exc}"
        ) from None
    return otel.exporting(cfg.otel_exporter, service)
