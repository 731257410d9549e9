"""The operator's routes: ``/healthz`` (the process answers), ``/readyz`` (it can sell: Redis
and Kafka reachable, not draining) and ``/metrics`` (Prometheus text), never refused by
admission (gateway/paths.py's PROBES)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from gateway import metrics
from gateway.errors import Unavailable
from gateway.limits import operations
from gateway.responses import json_response
from gateway.shutdown import Drain
from gateway.stock_gauges import STOCK


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    s = operations(request)
    drain: Drain = request.app.state.drain
    if drain.draining:  # stopping: out of the balancer first (gateway/shutdown.py)
        raise Unavailable("NOT_READY", draining=True)
    redis_ok = True
    try:
        await s.router.ping()
    except Exception:  # noqa: BLE001 - any failure means not ready
        redis_ok = False
    kafka_ok = await s.producer.reachable(1.0)
    if not (redis_ok and kafka_ok):
        raise Unavailable("NOT_READY", redis=redis_ok, kafka=kafka_ok)
    return json_response({"status": "ready", "redis": True, "kafka": True})


async def metrics_endpoint(request: Request) -> Response:
    s = operations(request)
    await STOCK.refresh(s)  # gateway/stock_gauges.py: bounded, whatever the scrape rate
    return PlainTextResponse(
        metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
