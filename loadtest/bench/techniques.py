"""The anti-oversell techniques side by side on one contended item: ``clients`` concurrent
clients (asyncio tasks of one process) make ``attempts`` attempts, one per distinct buyer, on an
item of ``units`` units, through each technique of ``loadtest.bench.guards`` in turn. After each
trial the store is asked how many units it sold: exactly ``units``, never more, or the trial fails.

    .venv/bin/python -m loadtest.bench.techniques --clients 1,8,64 --attempts 5000 --units 100

Per trial: decisions/s (attempts answered per second, won or lost), latency percentiles of one
attempt (lock waits and retries included), retries, and the client process's CPU share (near 100%:
the Python client, not the technique, was the limit). Prints one ``TECHNIQUES_JSON`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import uvloop
from redis.asyncio.cluster import ClusterNode, RedisCluster

from kernel.settings import Settings, settings
from loadtest.bench import guards
from loadtest.bench.context import Context, option
from loadtest.bench.results import Recorder, rotate
from loadtest.measure import child, latency

NAMES = (
    "pg_conditional",
    "pg_for_update",
    "pg_optimistic",
    "redis_decr",
    "redis_lua",
    "redis_lock_pg",
)
BASELINE = "pg_conditional"
CLIENTS = (1, 8, 64)
UNITS = 100
ATTEMPTS = 5000
PREFIX = "TECHNIQUES_JSON "


def _guard(name: str, pool: asyncpg.Pool, redis: RedisCluster) -> guards.Guard:
    made: dict[str, guards.Guard] = {
        "pg_conditional": guards.PgConditional(pool),
        "pg_for_update": guards.PgForUpdate(pool),
        "pg_optimistic": guards.PgOptimistic(pool),
        "redis_decr": guards.RedisDecr(redis),
        "redis_lua": guards.RedisLua(redis),
        "redis_lock_pg": guards.RedisLockPg(redis, pool),
    }
    return made[name]


async def trial(
    cfg: Settings, redis: RedisCluster, name: str, clients: int, attempts: int, units: int
) -> dict[str, Any]:
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=clients, max_size=clients)
    guard = _guard(name, pool, redis)
    await guard.prepare(units)
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    retries = 0
    buyers = iter(range(1, attempts + 1))

    async def client() -> None:
        nonlocal retries
        for buyer in buyers:
            started = time.perf_counter()
            outcome, tried = await guard.attempt(buyer)
            latencies.append(time.perf_counter() - started)
            outcomes[outcome] += 1
            retries += tried

    try:
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sold = await guard.sold()
    finally:
        await guard.cleanup()
        await pool.close()
    found = latency.of_seconds(latencies)
    metrics: dict[str, Any] = {
        "clients": clients,
        "attempts": attempts,
        "units": units,
        "won": outcomes[guards.WON],
        "lost": outcomes[guards.LOST],
        "gave_up": outcomes[guards.GAVE_UP],
        "retries": retries,
        "elapsed_s": elapsed,
        "decisions_per_s": attempts / elapsed,
        "p50_ms": found.ms(50),
        "p99_ms": found.ms(99),
        "max_ms": found.max_ms(),
        "client_cpu_busy": cpu / elapsed if elapsed else 0.0,
        "sold_in_store": sold,
        "oversold": max(0, sold - units, outcomes[guards.WON] - units),
    }
    if isinstance(guard, guards.RedisDecr):
        metrics["lowest_counter"] = guard.lowest
    if isinstance(guard, guards.RedisLockPg):
        metrics["lost_locks"] = guard.lost_locks
    return metrics


def problems(m: dict[str, Any]) -> list[str]:
    found = []
    if m["oversold"]:
        found.append(f"OVERSOLD by {m['oversold']} (sold {m['sold_in_store']}, won {m['won']})")
    elif m["sold_in_store"] != m["units"] or m["won"] != m["units"]:
        found.append(f"sold {m['sold_in_store']} and won {m['won']} of {m['units']} units")
    if m["gave_up"]:
        found.append(f"{m['gave_up']} attempts gave up waiting for the lock")
    return found


async def run_all(
    cfg: Settings, names: Sequence[str], clients: Sequence[int], attempts: int, units: int
) -> list[dict[str, Any]]:
    nodes = [ClusterNode(h, int(p)) for h, p in (a.rsplit(":", 1) for a in cfg.redis_nodes)]
    redis = RedisCluster(startup_nodes=nodes, socket_timeout=10)
    trials = []
    try:
        for count in clients:
            for name in names:
                print(f"  {name:<15} {count:>3} clients ...", end="", flush=True, file=sys.stderr)
                try:
                    m = await trial(cfg, redis, name, count, attempts, units)
                except Exception as exc:  # noqa: BLE001 - report it, go on with the others
                    print(f" FAILED: {exc}", file=sys.stderr, flush=True)
                    trials.append({"technique": name, "clients": count, "error": str(exc)[:300]})
                    continue
                print(
                    f" {m['decisions_per_s']:,.0f} decisions/s, p99 {m['p99_ms']:.1f} ms,"
                    f" sold {m['sold_in_store']}",
                    file=sys.stderr,
                    flush=True,
                )
                trials.append({"technique": name, **m})
    finally:
        await redis.aclose()
    return trials


def argv(names: Sequence[str], clients: Sequence[int], attempts: int, units: int) -> list[str]:
    return [
        sys.executable, "-m", "loadtest.bench.techniques", "--only", ",".join(names),
        "--clients", ",".join(str(c) for c in clients), "--attempts", str(attempts),
        "--units", str(units),
    ]  # fmt: skip


@dataclass(frozen=True)
class TechniquesOptions:
    clients: str = option("1,8,64", "concurrent clients, levels")
    attempts: int = option(ATTEMPTS, "attempts per trial")
    units: int = option(UNITS, "stock of the contended item")


def measure(ctx: Context, a: TechniquesOptions, rec: Recorder) -> dict[str, Any]:
    """The ``techniques`` section: one subprocess per repeat, pinned to the load core, the
    techniques' order rotated every repeat. Returns the section's settings."""
    clients = [int(c) for c in a.clients.split(",") if c]
    attempts, units, core, repeats = a.attempts, a.units, ctx.opts.load_core, ctx.args.repeats
    for r in range(repeats):
        names = rotate(NAMES, r)
        print(f"[techniques] repeat {r + 1}/{repeats}", flush=True)
        try:
            done = child.run(
                argv(names, clients, attempts, units), PREFIX, what="techniques",
                timeout_s=3600, core=core,
            )  # fmt: skip
        except RuntimeError as exc:
            for name in names:
                rec.record(f"clients={clients[0]}", name, r, {}, [str(exc)[:300]])
            continue
        for t in done.result:
            scenario, name = f"clients={t['clients']}", t.pop("technique")
            if "error" in t:
                rec.record(scenario, name, r, {}, [f"run failed: {t['error']}"])
            else:
                rec.record(scenario, name, r, t, problems(t))
    shown = argv(NAMES, clients, attempts, units)
    return {
        "clients": list(clients),
        "attempts": attempts,
        "units": units,
        "baseline": BASELINE,
        "core": core,
        "tool_command": " ".join([f"taskset -c {core}", ".venv/bin/python", *shown[1:]]),
        "lock_ttl_ms": guards.LOCK_TTL_MS,
        "lock_wait_s": guards.LOCK_WAIT_S,
        "repeats": repeats,
    }


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.techniques", description=__doc__
    )
    parser.add_argument("--only", default=",".join(NAMES), help="techniques, comma separated")
    parser.add_argument("--clients", default=",".join(str(c) for c in CLIENTS))
    parser.add_argument("--attempts", type=int, default=ATTEMPTS)
    parser.add_argument("--units", type=int, default=UNITS)
    parsed = parser.parse_args(args)
    names = [n for n in parsed.only.split(",") if n]
    unknown = set(names) - set(NAMES)
    if unknown:
        parser.error(f"unknown techniques {sorted(unknown)}; known: {', '.join(NAMES)}")
    clients = [int(c) for c in parsed.clients.split(",") if c]
    trials = uvloop.run(run_all(settings(), names, clients, parsed.attempts, parsed.units))
    print(PREFIX + json.dumps(trials))


if __name__ == "__main__":
    main()
