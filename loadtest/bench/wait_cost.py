"""The ``wait_cost`` section: what confirming every reservation on the replica costs.

The router's ``reserve`` called by many concurrent coroutines (one process, uvloop, as a gateway
worker runs it), every call a new buyer on a shard with stock (the write path: DECR + 3 HSET), in
rounds that alternate WAIT on (``redis_wait_replicas=1``) and off (``0``), side by side in the
same run against the same cluster (``--repeats`` rounds per mode). Each round records
reservations/s and the p50 / p99 latency of a call; bench.md gives the median over rounds of
each mode, and on/off ratios.

The item's keys are deleted after each round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

import uvloop

from kernel.events import OrderPlaced, encode
from kernel.settings import Settings
from loadtest.bench import results as store
from loadtest.bench.context import Context, option
from loadtest.bench.harness import Measured
from loadtest.bench.report import fmt
from loadtest.measure import latency
from shard_router import Outcome, ShardRouter, shard_keys

_STOCK_PER_SHARD = 100_000_000


async def _round(
    cfg: Settings, wait: bool, concurrency: int, opts: WaitOptions, first_user: int
) -> dict[str, Any]:
    """One round's figures: reservations made, seconds, per second, a call's p50 and p99."""
    router = ShardRouter(dataclasses.replace(cfg, redis_wait_replicas=1 if wait else 0))
    await router.start()
    item = uuid.uuid4().int % 10**12 + 10**14
    try:
        for k in range(opts.shards):
            await router.load_shard(item, k, _STOCK_PER_SHARD, [], [])
        event = encode(OrderPlaced(str(uuid.uuid4()), item, 1, 0, 0, 0, 0))  # a real one's size

        def payload(_shard: int) -> bytes:
            return event

        latencies: list[float] = []
        users = iter(range(first_user, first_user + 10**9))
        stop_at = time.perf_counter() + opts.seconds

        async def buyer() -> None:
            while time.perf_counter() < stop_at:
                user = next(users)
                order = str(uuid.uuid4())
                started = time.perf_counter()
                res = await router.reserve(item, opts.shards, user, order, payload)
                latencies.append(time.perf_counter() - started)
                assert res.outcome is Outcome.RESERVED, res

        began = time.perf_counter()
        await asyncio.gather(*(buyer() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
        found = latency.of_seconds(latencies)
        return {
            "wait": wait,
            "concurrency": concurrency,
            "reserved": len(latencies),
            "seconds": elapsed,
            "p50_ms": found.ms(50),
            "p99_ms": found.ms(99),
            "per_s": len(latencies) / elapsed,
        }
    finally:
        for k in range(opts.shards):
            await router.client.delete(*shard_keys(item, k))
        await router.close()


@dataclass(frozen=True)
class WaitOptions:
    concurrency: str = option("1,16,256", "concurrent callers, levels")
    seconds: float = option(3.0, "length of one round")
    shards: int = option(6, "shards of the item")


def measure(ctx: Context, opts: WaitOptions, rec: store.Recorder) -> dict[str, Any]:
    levels = [int(c) for c in opts.concurrency.split(",") if c]
    # on, off, off, on, on, off...: neither mode always runs first (a warmer cluster, a busier
    # moment of the machine).
    modes = [
        w for p in range(ctx.args.repeats) for w in ((True, False) if p % 2 == 0 else (False, True))
    ]
    for concurrency in levels:
        for i, wait in enumerate(modes):
            first = (len(rec.runs) + 1) * 10**9

            def one(w: bool = wait, c: int = concurrency, u: int = first) -> Measured:
                return uvloop.run(_round(ctx.cfg, w, c, opts, first_user=u)), []

            where = (f"callers={concurrency}", "on" if wait else "off", i // 2)
            rec.step(f"{concurrency} callers, WAIT {where[1]}", where, one, _brief)
    about = dataclasses.asdict(opts)
    return {**about, "repeats": ctx.args.repeats, "wait_timeout_ms": ctx.cfg.redis_wait_timeout_ms}


def _brief(m: dict[str, Any]) -> str:
    return f"{m['per_s']:,.0f} reservations/s, p50 {m['p50_ms']:.3f} ms, p99 {m['p99_ms']:.3f} ms"


def render(data: store.Section) -> list[str]:
    s, runs = data["settings"], [r for r in data["runs"] if r["metrics"]]

    def med(scenario: str, mode: str, key: str) -> float:
        found = [
            r["metrics"][key] for r in runs if (r["scenario"], r["subject"]) == (scenario, mode)
        ]
        return statistics.median(found) if found else 0.0

    rows = []
    for scenario in sorted({r["scenario"] for r in runs}, key=lambda c: int(c.split("=")[1])):
        on, off = med(scenario, "on", "per_s"), med(scenario, "off", "per_s")
        rows.append([
            scenario.split("=")[1], fmt.rate(on), fmt.rate(off), f"{on / off:.2f}" if off else "—",
            f"{fmt.ms(med(scenario, 'on', 'p50_ms'))} / {fmt.ms(med(scenario, 'off', 'p50_ms'))}",
            f"{fmt.ms(med(scenario, 'on', 'p99_ms'))} / {fmt.ms(med(scenario, 'off', 'p99_ms'))}",
        ])  # fmt: skip
    head = ["callers", "WAIT on, reservations/s", "WAIT off", "on ÷ off", "p50 on / off, ms",
            "p99 on / off, ms"]  # fmt: skip
    return [
        "## Cost of waiting for the replica (WAIT) on the reserve path",
        "",
        *fmt.provenance(data),
        f"The router's reserve from N concurrent callers, {s['shards']} shards, {s['seconds']:g} s"
        " rounds, WAIT on and off alternated in the same run, median of the rounds of each mode;"
        f" WAIT timeout {s['wait_timeout_ms']} ms.",
        "",
        *fmt.table(head, rows),
    ]
