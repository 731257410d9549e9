"""``python -m loadtest.bench.wait_cost``: what confirming every reservation on the replica costs.

The router's ``reserve`` called by many concurrent coroutines (one process, uvloop, as a gateway
worker runs it), every call a new buyer on a shard with stock (the write path: DECR + 3 HSET), in
rounds that alternate WAIT on (``redis_wait_replicas=1``) and off (``0``), side by side in the
same run against the same cluster. Each round reports reservations/s and the p50 / p99 latency
of a call; the summary gives the median over rounds of each mode, and on/off ratios.

The item's keys are deleted after each round.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
import uuid
from dataclasses import dataclass

import uvloop

from kernel.events import OrderPlaced, encode
from kernel.settings import Settings, settings
from loadtest.measure import latency
from shard_router import Outcome, ShardRouter, shard_keys

_STOCK_PER_SHARD = 100_000_000


@dataclass(frozen=True, slots=True)
class Round:
    wait: bool
    concurrency: int
    reserved: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.reserved / self.seconds


async def _round(
    cfg: Settings, wait: bool, concurrency: int, opts: argparse.Namespace, first_user: int
) -> Round:
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
        return Round(wait, concurrency, len(latencies), elapsed, found.ms(50), found.ms(99))
    finally:
        for k in range(opts.shards):
            await router.client.delete(*shard_keys(item, k))
        await router.close()


def _line(label: str, rounds: list[Round]) -> str:
    rate = statistics.median(r.per_s for r in rounds)
    p50 = statistics.median(r.p50_ms for r in rounds)
    p99 = statistics.median(r.p99_ms for r in rounds)
    return f"{label:<22} {rate:>12,.0f} {p50:>9.3f} {p99:>9.3f}"


async def run(opts: argparse.Namespace) -> None:
    cfg = settings()
    levels = [int(c) for c in opts.concurrency.split(",")]
    rounds: list[Round] = []
    # on, off, off, on, on, off...: neither mode always runs first (a warmer cluster, a busier
    # moment of the machine).
    modes = [
        w for p in range(opts.rounds) for w in ((True, False) if p % 2 == 0 else (False, True))
    ]
    for concurrency in levels:
        for wait in modes:
            r = await _round(cfg, wait, concurrency, opts, first_user=(len(rounds) + 1) * 10**9)
            rounds.append(r)
            print(
                f"{concurrency:>4} callers, WAIT {'on ' if wait else 'off'}: {r.per_s:>10,.0f}"
                f" reservations/s  p50 {r.p50_ms:.3f} ms  p99 {r.p99_ms:.3f} ms",
                flush=True,
            )
    print(
        f"\n{opts.shards} shards, {opts.seconds:g} s rounds, median of {opts.rounds} rounds per"
        f" mode; WAIT {cfg.redis_wait_timeout_ms} ms timeout"
    )
    print(f"{'':<22} {'reserve/s':>12} {'p50 ms':>9} {'p99 ms':>9}")
    for concurrency in levels:
        on = [r for r in rounds if r.wait and r.concurrency == concurrency]
        off = [r for r in rounds if not r.wait and r.concurrency == concurrency]
        print(_line(f"{concurrency} callers, WAIT on", on))
        print(_line(f"{concurrency} callers, WAIT off", off))
        ratio = statistics.median(r.per_s for r in on) / statistics.median(r.per_s for r in off)
        print(f"{'':<22} with WAIT: {ratio:.2f} x the throughput")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--concurrency", default="1,16,256", help="concurrent callers, one level or several (1,16)"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode")
    parser.add_argument("--shards", type=int, default=6, help="shards of the item")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
