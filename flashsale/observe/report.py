"""A sale's report: its timeline from PostgreSQL and Prometheus, drawn to a PNG, summed up in
lines. ``flashsale report`` prints them; ``flashsale demo`` ends with them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flashsale.observe import timeline
from flashsale.observe.prom import Prometheus
from flashsale.observe.summary import lines
from kernel.settings import Settings


def default_path(cfg: Settings, sale_id: int) -> Path:
    return cfg.state_dir / "reports" / f"sale-{sale_id}.png"


async def write_report(
    cfg: Settings, pool: Any, sale_id: int, out: Path | None = None
) -> tuple[timeline.Timeline, Path, list[str]]:
    """The timeline, the PNG written (``out``, else under the state directory) and the
    summary's lines; LookupError when the sale does not exist. Needs matplotlib (the load
    tools' extra)."""
    from flashsale.observe.chart import draw  # matplotlib: only when a report is drawn

    found = await timeline.from_database(pool, sale_id, cfg.scrape_interval_s)
    prom = Prometheus(cfg.prometheus_url)
    # Blocking HTTP and drawing: off the event loop.
    await asyncio.to_thread(timeline.add_prometheus, found, prom, cfg.scrape_interval_s)
    path = out or default_path(cfg, sale_id)
    await asyncio.to_thread(draw, found, path)
    return found, path, lines(found, str(path))
