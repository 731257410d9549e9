"""How much batching buys: the writer draining a backlog of orders at several batch sizes.

``python -m loadtest.bench.writer_load --batch-sizes 1,100,1000 --orders 20000 [--json]``

For each batch size: a fresh orders topic and item row, N orders produced up front (not timed),
then one writer (fresh group) drains them. The rate is orders stored per second from the first
batch to the last offset commit (group join excluded; ``wall_s`` includes it). Batch size 1
drains fewer orders (``--orders-at-1``) to stay short. Needs the local stack.

The ``writer`` section (``section``) runs it with ``--json`` as a subprocess per repeat, so the
writer's event loop and the benchmark's never share a process; the batch of 1 is the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import uvloop
from confluent_kafka import Producer

from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.settings import Settings, settings
from loadtest.bench.context import Context, option
from loadtest.bench.results import Recorder, rotate
from loadtest.bench.topics import scratch_topics
from loadtest.measure import child
from rig.sale import stored_item
from writer import app
from writer.consumer import WriterStats

SHARDS = 4
HOUR_MS = 3_600_000
RESULT_PREFIX = "WRITER_JSON "
BATCH_SIZES = (1, 100, 1000)
TIMEOUT_S = 1800


@dataclass(frozen=True, slots=True)
class Result:
    batch_size: int
    orders: int
    seconds: float  # first batch -> last commit
    wall_s: float  # writer start -> exit, group join and drain check included
    orders_per_s: float
    ratio_to_batch_1: float | None = None


def _produce(cfg: Settings, topic: str, item: int, orders: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cfg.kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    now_ms = int(time.time() * 1000)
    for user in range(1, orders + 1):
        event = OrderPlaced(
            order_id=new_order_id(item),
            item_id=item,
            user_id=user,
            shard=user % SHARDS,
            home_shard=user % SHARDS,
            created_at_ms=now_ms,
            expires_at_ms=now_ms + HOUR_MS,
        )
        while True:
            try:
                producer.produce(topic, encode(event), event.order_id.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit("bench: could not produce the orders")


async def measure(cfg: Settings, pool: asyncpg.Pool, batch_size: int, orders: int) -> Result:
    tag = uuid.uuid4().hex[:12]
    topic, deadletter = f"bench.orders.{tag}", f"bench.deadletter.{tag}"
    with scratch_topics(cfg, {topic: cfg.orders_partitions, deadletter: 1}):
        item = await stored_item(pool, orders, SHARDS, name="writer bench", product_id="bench")
        await asyncio.to_thread(_produce, cfg, topic, item, orders)
        stats = WriterStats()
        run_cfg = dataclasses.replace(
            cfg,
            orders_topic=topic,
            deadletter_topic=deadletter,
            writer_group=f"bench-writer-{tag}",
            writer_batch_size=batch_size,
            writer_streams=("orders",),  # the orders path only
        )
        started = time.monotonic()
        await app.run(run_cfg, metrics_port=None, once=True, stats=stats)
        wall = time.monotonic() - started
    stored = await pool.fetchval(
        "SELECT count(*) FROM flash_sale_order WHERE item_id = $1 AND status = 'PENDING'", item
    )
    if stored != orders or stats.first_batch_at is None or stats.last_commit_at is None:
        raise SystemExit(f"bench: batch size {batch_size} stored {stored} of {orders} orders")
    seconds = stats.last_commit_at - stats.first_batch_at
    return Result(batch_size, orders, seconds, wall, orders / seconds)


async def bench(
    cfg: Settings, batch_sizes: list[int], orders: int, orders_at_1: int
) -> list[Result]:
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=2)
    try:
        results = []
        for size in batch_sizes:
            n = orders if size > 1 else min(orders, orders_at_1)
            results.append(await measure(cfg, pool, size, n))
            print(f"  batch size {size}: {results[-1].orders_per_s:,.0f} orders/s", file=sys.stderr)
    finally:
        await pool.close()
    base = next((r.orders_per_s for r in results if r.batch_size == 1), None)
    if base is None:
        return results
    return [dataclasses.replace(r, ratio_to_batch_1=r.orders_per_s / base) for r in results]


@dataclass(frozen=True)
class WriterOptions:
    orders: int = option(20_000, "orders per writer run")
    orders_at_1: int = option(2_000, "orders at batch 1 (it drains slowly)")


def child_argv(batch_sizes: Sequence[int], orders: int, orders_at_1: int) -> list[str]:
    return [
        sys.executable, "-m", "loadtest.bench.writer_load",
        "--batch-sizes", ",".join(str(b) for b in batch_sizes), "--orders", str(orders),
        "--orders-at-1", str(orders_at_1), "--json",
    ]  # fmt: skip


def command(orders: int, orders_at_1: int) -> str:
    shown = child_argv(BATCH_SIZES, orders, orders_at_1)
    return " ".join([".venv/bin/python", *shown[1:]])


def section(ctx: Context, a: WriterOptions, rec: Recorder) -> dict[str, Any]:
    """Every repeat runs the batch sizes in a rotated order; returns the section's settings."""
    repeats, orders, orders_at_1 = ctx.args.repeats, a.orders, a.orders_at_1
    about: dict[str, Any] = {}
    for r in range(repeats):
        sizes = rotate(BATCH_SIZES, r)
        print(f"[writer] repeat {r + 1}/{repeats}: batch sizes {sizes} ...", end="", flush=True)
        started = time.monotonic()
        try:
            shown = child_argv(sizes, orders, orders_at_1)
            report = child.summary(shown, RESULT_PREFIX, what="writer_load", timeout_s=TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - record it, keep measuring the others
            print(f" FAILED: {exc}", flush=True)
            for size in sizes:
                rec.record("batch", str(size), r, {}, [f"run failed: {str(exc)[:300]}"])
            continue
        about = {k: v for k, v in report.items() if k != "results"}
        figures = []
        for result in report["results"]:
            metrics = {k: v for k, v in result.items() if k != "ratio_to_batch_1"}
            rec.record("batch", str(result["batch_size"]), r, metrics, [])
            figures.append(f"{result['batch_size']}: {result['orders_per_s']:,.0f}/s")
        print(f" {', '.join(figures)} ({time.monotonic() - started:.0f} s)", flush=True)
    return {
        "batch_sizes": list(BATCH_SIZES),
        "orders": orders,
        "orders_at_1": orders_at_1,
        "writer_bench": about,
        "tool_command": command(orders, orders_at_1),
        "repeats": repeats,
    }


def _table(results: list[Result]) -> str:
    lines = [
        f"{'batch size':>10}  {'orders':>7}  {'seconds':>8}  {'orders/s':>9}  {'vs batch 1':>10}",
    ]
    for r in results:
        ratio = f"{r.ratio_to_batch_1:.1f}x" if r.ratio_to_batch_1 is not None else "-"
        lines.append(
            f"{r.batch_size:>10}  {r.orders:>7}  {r.seconds:>8.2f}  {r.orders_per_s:>9,.0f}"
            f"  {ratio:>10}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.writer_load", description=__doc__
    )
    parser.add_argument("--batch-sizes", default="1,100,1000")
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--orders-at-1", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help=f"print one {RESULT_PREFIX}line")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or args.orders < 1:
        parser.error("batch sizes and --orders must be positive")
    cfg = settings()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        results = runner.run(bench(cfg, sizes, args.orders, args.orders_at_1))
    if args.json:
        report: dict[str, Any] = {
            "benchmark": "writer",
            "partitions": cfg.orders_partitions,
            "batch_ms": cfg.writer_batch_ms,
            "results": [dataclasses.asdict(r) for r in results],
        }
        print(RESULT_PREFIX + json.dumps(report))
    else:
        print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
