"""Flash vs ordinary voucher reservations/s under contention on one code.

    .venv/bin/python -m loadtest.bench.voucher_load [--uses 2000] [--attempts 5000] \
        [--concurrency 64]

Starts a gateway (one granian worker) and a vouchers-only writer on a topic of its own, creates
one flash and one ordinary voucher with ``--uses`` uses each, then, per kind, ``--concurrency``
clients send ``--attempts`` reservations with distinct orderIds and customers (closed loop) at
the one code. Prints JSON: overall reservations/s per kind and their ratio (ordinary = the
baseline), grants/s until the last use went, latency percentiles, and the answers. The run is
checked: exactly ``--uses`` 201s per kind and ``used_count`` = ``--uses`` once the writer drained.

The ``vouchers`` section (``section``) runs it as a subprocess per repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import asyncpg

from flashsale.stack.processes import http_ready, process_group, settings_env, wait_ready
from kernel.settings import Settings, settings
from loadtest.bench.context import Context
from loadtest.bench.results import Recorder
from loadtest.bench.topics import scratch_topics
from loadtest.constants import VOUCHER_BENCH_PORT
from loadtest.measure import child, latency

MODULE = "loadtest.bench.voucher_load"
TIMEOUT_S = 1200
KINDS = ("flash", "ordinary")
TOPIC_PARTITIONS = 6
READY_TIMEOUT_S = 30.0
# A 250 ms Redis deadline on this shared 2-core box turns scheduling hiccups into 503s, and
# every reservation must be decided for the counts to check: the tests' 1 s deadline.
REDIS_TIMEOUT_MS = 1000
RESULT_PREFIX = "VOUCHERS_JSON "


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def voucher_stack(cfg: Settings, port: int) -> Iterator[str]:
    """A topic and group of its own, a vouchers-only writer and a gateway; all gone after."""
    tag = uuid.uuid4().hex[:12]
    topic = f"bench.vouchers.{tag}"
    env = settings_env(
        vouchers_topic=topic,
        voucher_writer_group=f"bench-voucher-writer-{tag}",
        writer_streams=("vouchers",),
        inflight_cap=100_000,
    )
    gateway_env = {**env, **settings_env(gateway_port=port, redis_timeout_ms=REDIS_TIMEOUT_MS)}
    writer_argv = [sys.executable, "-m", "writer", "--metrics-port", "-1"]
    base = f"http://{cfg.gateway_host}:{port}"
    with (
        scratch_topics(cfg, {topic: TOPIC_PARTITIONS}),
        process_group(writer_argv, env=env),
        process_group([sys.executable, "-m", "gateway"], env=gateway_env) as gateway,
    ):
        wait_ready(gateway, http_ready(f"{base}/readyz"), READY_TIMEOUT_S, "gateway")
        yield base


async def create(http: aiohttp.ClientSession, cfg: Settings, kind: str, uses: int) -> str:
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
    admin = _bearer(cfg.admin_token)
    async with http.post("/admin/vouchers", json=body, headers=admin) as response:
        assert response.status == 201, await response.text()
    return code


async def burst(
    http: aiohttp.ClientSession, cfg: Settings, code: str, attempts: int, concurrency: int
) -> dict[str, Any]:
    """``concurrency`` clients, each taking the next attempt as soon as its last one answered."""
    service = _bearer(cfg.service_token)
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
                f"/vouchers/{code}/reservations", json=body, headers=service
            ) as response:
                await response.read()
                statuses[response.status] += 1
            done = time.perf_counter()
            latencies.append(done - sent)
            if response.status == 201:
                last_grant = max(last_grant, done - started)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    took = time.perf_counter() - started
    found = latency.of_seconds(latencies)
    return {
        "rps": round(attempts / took),
        "grants_per_s": round(statuses[201] / last_grant) if last_grant else 0,
        "seconds": round(took, 3),
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "p50_ms": round(found.ms(50), 2),
        "p99_ms": round(found.ms(99), 2),
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
            for kind in KINDS:
                warm = await create(http, cfg, kind, concurrency)
                await burst(http, cfg, warm, concurrency * 2, concurrency)  # connections, caches
                code = await create(http, cfg, kind, uses)
                results[kind] = await burst(http, cfg, code, attempts, concurrency)
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


def _child() -> dict[str, Any]:
    argv = [sys.executable, "-m", MODULE]
    report = child.summary(argv, RESULT_PREFIX, what=MODULE, timeout_s=TIMEOUT_S)
    for key in ("flash_rps", "ordinary_rps", "ratio"):
        if key not in report:
            raise RuntimeError(f"{MODULE} printed no {key!r}")
    return report


def section(ctx: Context, _: None, rec: Recorder) -> dict[str, Any]:
    repeats = ctx.args.repeats
    command = f".venv/bin/python -m {MODULE}"
    about: dict[str, Any] = {}
    for r in range(repeats):
        print(f"[vouchers] repeat {r + 1}/{repeats} ...", end="", flush=True)
        started = time.monotonic()
        try:
            report = _child()
        except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
            print(f" FAILED: {exc}", flush=True)
            for kind in KINDS:
                rec.record("one_code", kind, r, {}, [f"run failed: {str(exc)[:300]}"])
            continue
        about = {k: report[k] for k in ("uses", "attempts", "concurrency") if k in report}
        for kind in KINDS:
            detail = report.get(kind, {})
            metrics = {"rps": float(report[f"{kind}_rps"])}
            metrics.update({k: v for k, v in detail.items() if isinstance(v, int | float)})
            metrics["answers"] = detail.get("answers", {})
            rec.record("one_code", kind, r, metrics, [])
        took = time.monotonic() - started
        print(
            f" flash {report['flash_rps']:,.0f}/s, ordinary {report['ordinary_rps']:,.0f}/s,"
            f" ratio {report['ratio']} ({took:.0f} s)",
            flush=True,
        )
    return {"tool_command": command, **about, "repeats": repeats}


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.voucher_load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--uses", type=int, default=2000)
    parser.add_argument("--attempts", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--port", type=int, default=VOUCHER_BENCH_PORT)
    args = parser.parse_args()
    cfg = settings()
    with voucher_stack(cfg, args.port) as base:
        report = asyncio.run(bench(base, cfg, args.uses, args.attempts, args.concurrency))
    print(RESULT_PREFIX + json.dumps(report))


if __name__ == "__main__":
    main()
