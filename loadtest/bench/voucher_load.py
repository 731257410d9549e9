"""Flash vs ordinary voucher reservations/s under contention on one code.

    .venv/bin/python -m tests.bench_vouchers [--uses 2000] [--attempts 5000] [--concurrency 64]

Starts a gateway (one granian worker) and a vouchers-only writer on a topic of its own, creates
one flash and one ordinary voucher with ``--uses`` uses each, then, per kind, ``--concurrency``
clients send ``--attempts`` reservations with distinct orderIds and customers (closed loop) at
the one code. Prints JSON: overall reservations/s per kind and their ratio (ordinary = the
baseline), grants/s until the last use went, latency percentiles, and the answers. The run is
checked: exactly ``--uses`` 201s per kind and ``used_count`` = ``--uses`` once the writer drained.
Not collected by pytest (its name does not start with test_).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import asyncpg
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kernel.settings import PROJECT_ROOT, Settings, settings
from tests.support.gateway import running_gateway

SERVICE = {"Authorization": "Bearer dev-service-token"}
ADMIN = {"Authorization": "Bearer dev-admin-token"}


@contextmanager
def voucher_stack(cfg: Settings, port: int) -> Iterator[str]:
    """A topic and group of its own, a vouchers-only writer and a gateway; all gone after."""
    tag = uuid.uuid4().hex[:12]
    topic = f"bench.vouchers.{tag}"
    admin = AdminClient({"bootstrap.servers": cfg.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=10)[topic].result(timeout=30)
    env = {
        "FLASHSALE_VOUCHERS_TOPIC": topic,
        "FLASHSALE_VOUCHER_WRITER_GROUP": f"bench-voucher-writer-{tag}",
        "FLASHSALE_WRITER_STREAMS": "vouchers",
        "FLASHSALE_INFLIGHT_CAP": "100000",
    }
    writer = subprocess.Popen(
        [sys.executable, "-m", "writer", "--metrics-port", "-1"],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with running_gateway(cfg, port, **env) as base:
            yield base
    finally:
        os.killpg(writer.pid, signal.SIGTERM)
        try:
            writer.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait(5)
        admin.delete_topics([topic], operation_timeout=10)[topic].exception(timeout=30)


async def create(http: aiohttp.ClientSession, kind: str, uses: int) -> str:
    code = f"bench-{kind}-{uuid.uuid4().hex[:10]}"
    now = dt.datetime.now(dt.UTC)
    body = {
        "code": code,
        "discountAmount": 100_000,
        "totalLimit": uses,
        "startsAt": (now - dt.timedelta(minutes=1)).isoformat(),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat(),
        "isFlash": kind == "flash",
    }
    async with http.post("/admin/vouchers", json=body, headers=ADMIN) as response:
        assert response.status == 201, await response.text()
    return code


async def burst(
    http: aiohttp.ClientSession, code: str, attempts: int, concurrency: int
) -> dict[str, Any]:
    """``concurrency`` clients, each taking the next attempt as soon as its last one answered."""
    attempt = iter(range(1, attempts + 1))
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    last_grant = 0.0
    started = time.perf_counter()

    async def client() -> None:
        nonlocal last_grant
        for customer in attempt:
            body = {"customerId": customer, "orderId": uuid.uuid4().hex, "orderAmount": 500_000}
            sent = time.perf_counter()
            async with http.post(
                f"/vouchers/{code}/reservations", json=body, headers=SERVICE
            ) as response:
                await response.read()
                statuses[response.status] += 1
            done = time.perf_counter()
            latencies.append(done - sent)
            if response.status == 201:
                last_grant = max(last_grant, done - started)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    took = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": round(attempts / took),
        "grants_per_s": round(statuses[201] / last_grant) if last_grant else 0,
        "seconds": round(took, 3),
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


async def used_count(db: asyncpg.Pool, code: str, expected: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        used: int = await db.fetchval("select used_count from voucher where code = $1", code)
        if used >= expected or time.monotonic() > deadline:
            return used
        await asyncio.sleep(0.1)


async def bench(base: str, cfg: Settings, uses: int, attempts: int, concurrency: int) -> Any:
    db = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=2)
    assert db is not None
    results: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    try:
        async with aiohttp.ClientSession(base, connector=connector) as http:
            for kind in ("flash", "ordinary"):
                warm = await create(http, kind, concurrency)
                await burst(http, warm, concurrency * 2, concurrency)  # connections, caches
                code = await create(http, kind, uses)
                results[kind] = await burst(http, code, attempts, concurrency)
                results[kind]["used_count"] = await used_count(db, code, uses, 60)
                assert results[kind]["answers"].get("201") == uses, results
                assert results[kind]["used_count"] == uses, results
    finally:
        await db.close()
    return {
        "flash_rps": results["flash"]["rps"],
        "ordinary_rps": results["ordinary"]["rps"],
        "ratio": round(results["flash"]["rps"] / results["ordinary"]["rps"], 2),
        "grants_ratio": round(
            results["flash"]["grants_per_s"] / results["ordinary"]["grants_per_s"], 2
        ),
        "uses": uses,
        "attempts": attempts,
        "concurrency": concurrency,
        **results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_vouchers", description=__doc__)
    parser.add_argument("--uses", type=int, default=2000)
    parser.add_argument("--attempts", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--port", type=int, default=18390)
    args = parser.parse_args()
    cfg = settings()
    with voucher_stack(cfg, args.port) as base:
        report = asyncio.run(bench(base, cfg, args.uses, args.attempts, args.concurrency))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
