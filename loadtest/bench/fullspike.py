"""The ``spike`` section: a whole flash sale through the real pipeline, timed from the first
purchase to the last order committed in PostgreSQL.

One gateway worker (server core) in front of an item of ``units`` units on ``shards`` shards; a
writer process (unpinned: it shares the machine with the stack) on a Kafka topic of the run's own;
wrk (load core, ``loadtest/generators/wrk/spike.lua``) sends ``buyers`` distinct buyers, each
exactly once, as fast as the gateway answers. Meanwhile the item's orders are counted in PostgreSQL
every ``POLL_S``. Afterwards the sale is checked: exactly ``units`` 202s, ``units`` order rows from
as many distinct buyers, ``sold = quantity``, every shard at 0 in Redis, no 5xx.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from loadtest.bench import sale, servers
from loadtest.bench.context import Context, option
from loadtest.bench.results import Recorder
from loadtest.bench.topics import own_topics
from loadtest.constants import BENCH_PORTS
from loadtest.generators import tokens, wrk
from loadtest.measure import cpu
from rig.admin import NewItem, new_sale
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS
from shard_router import shard_keys

POLL_S = 0.05
WARM_TIMEOUT_S = 60.0
GATEWAY_ENV = settings_env(**LIFTED_IP_LIMITS)  # the sold-out flag's TTL as shipped


@dataclass(frozen=True, slots=True)
class Plan:
    units: int
    shards: int
    buyers: int
    connections: int
    server_core: int
    load_core: int
    writer_cores: str
    timeout_s: float  # for the whole spike to be answered, and again for the writer to drain


@dataclass
class CommitClock:
    """Counts the item's orders in PostgreSQL every ``POLL_S`` on a thread of its own."""

    dsn: str
    item_id: int
    units: int
    first_at: float | None = None  # time.monotonic() when the count was first > 0
    last_at: float | None = None  # ... first >= units
    count: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM flash_sale_order WHERE item_id = %s", (self.item_id,)
                ).fetchone()
                now = time.monotonic()
                self.count = int(row[0]) if row else 0
                if self.count and self.first_at is None:
                    self.first_at = now
                if self.count >= self.units:
                    self.last_at = now
                    return
                time.sleep(POLL_S)


def settings(plan: Plan) -> dict[str, Any]:
    shown = {k: v for k, v in dataclasses.asdict(plan).items() if k != "timeout_s"}
    return {**shown, "poll_s": POLL_S, "gateway_env": GATEWAY_ENV}


def _create_sale(base: str, cfg: Settings, units: int, shards: int) -> tuple[sale.Item, sale.Item]:
    """(warm-up item: 1 unit, the spike's item), one sale, open now, armed."""
    items = [NewItem("spike-warmup", 1, 1, price=990), NewItem("spike", units, shards, price=990)]
    made = new_sale(
        base,
        cfg,
        items,
        opens_at=time.time() - 5,
        hours=1,
        payment_window_s=3600,
        name="loadtest spike",
    )
    warm, spike = (sale.Item(i["itemId"], i["shards"]) for i in made["items"])
    return warm, spike


def _wait_for_orders(dsn: str, item_id: int, count: int, timeout_s: float) -> None:
    clock = CommitClock(dsn, item_id, count)
    thread = threading.Thread(target=clock.run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    clock.stop.set()
    if clock.last_at is None:
        raise RuntimeError(
            f"the writer stored {clock.count} of {count} orders in {timeout_s:.0f} s"
        )


def run_once(
    cfg: Settings, plan: Plan, workdir: Path, log_dir: Path, buyers: tokens.BuyerIds
) -> tuple[dict[str, Any], list[str]]:
    port = free_port(set(), BENCH_PORTS)
    base = f"http://127.0.0.1:{port}"
    token_file = tokens.write(cfg, workdir / "spike.tokens", buyers.take(plan.buyers))
    with own_topics(cfg, "spike") as env:
        writer_argv = [sys.executable, "-m", "writer", "--metrics-port", "-1"]
        gateway_env = {**GATEWAY_ENV, **env, **settings_env(gateway_port=port)}
        gateway_ready = servers.http_ready(f"{base}/readyz", 200)
        with (
            servers.running(
                "spike-writer", writer_argv, lambda: True, log_dir, plan.writer_cores, env
            ) as writer,
            servers.running(
                "spike-gateway",
                servers.gateway_argv(port),
                gateway_ready,
                log_dir,
                plan.server_core,
                gateway_env,
            ) as gateway,
        ):
            warm, item = _create_sale(base, cfg, plan.units, plan.shards)
            try:
                # One order end to end: the writer has joined its group and stores orders.
                status = sale.purchase(base, warm, next(tokens.signed(cfg, buyers.take(1))))
                if status != 202:
                    raise RuntimeError(f"the warm-up purchase answered {status}")
                _wait_for_orders(cfg.pg_dsn, warm.item_id, 1, WARM_TIMEOUT_S)
                return _spike(cfg, plan, base, item, token_file, gateway.pid, writer.pid)
            finally:
                _drop(cfg, (warm, item))


def _spike(
    cfg: Settings,
    plan: Plan,
    base: str,
    item: sale.Item,
    token_file: Path,
    gateway_pid: int,
    writer_pid: int,
) -> tuple[dict[str, Any], list[str]]:
    clock = CommitClock(cfg.pg_dsn, item.item_id, plan.units)
    poller = threading.Thread(target=clock.run, daemon=True)
    with cpu.used(writer_pid) as writer:
        poller.start()
        with cpu.used(gateway_pid) as gateway:
            raw, all_answered, wrk_cpu_s = wrk.spike(
                base + item.path, token_file, plan.buyers, plan.connections, plan.load_core,
                plan.timeout_s,
            )  # fmt: skip
        poller.join(plan.timeout_s)
        clock.stop.set()
    gateway_cpu_s, writer_cpu_s = gateway.of(gateway_pid), writer.of(writer_pid)
    metrics = _figures(raw, clock, plan)
    metrics.update(gateway_cpu_s=gateway_cpu_s, writer_cpu_s=writer_cpu_s, wrk_cpu_s=wrk_cpu_s)
    if metrics["answered"]:
        metrics["cpu_us_per_req"] = gateway_cpu_s / metrics["answered"] * 1e6
    metrics.update(_database(cfg, item))
    metrics["redis_stock_left"] = _stock_left(cfg, item)
    return metrics, _problems(metrics, plan, all_answered, clock)


def _figures(raw: dict[str, Any], clock: CommitClock, plan: Plan) -> dict[str, Any]:
    result = wrk.parse(raw)
    first_request = raw["first_request_us"] / 1e6
    spike_s = raw["last_response_us"] / 1e6 - first_request
    first_202, last_202 = raw["first_202_us"] / 1e6, raw["last_202_us"] / 1e6
    metrics: dict[str, Any] = {
        "buyers": plan.buyers,
        "units": plan.units,
        "answered": raw["answered"],
        "extra_healthz": raw["extra_200"],
        "statuses": {
            k[1:]: raw[k] for k in ("s202", "s409", "s410", "s429", "s503", "sother") if raw[k]
        },
        "spike_s": spike_s,
        "rps": raw["answered"] / spike_s if spike_s > 0 else 0.0,
        "p50_ms": result.p50_ms,
        "p90_ms": result.p90_ms,
        "p99_ms": result.p99_ms,
        "p999_ms": result.p999_ms,
        "max_ms": result.max_ms,
        "socket_errors": result.socket_errors,
        "timeouts": result.timeouts,
        "sellout_s": last_202 - first_202 if raw["s202"] else None,
    }
    if clock.last_at is not None and raw["s202"]:
        metrics["first_purchase_to_last_commit_s"] = clock.last_at - first_202
        metrics["first_request_to_last_commit_s"] = clock.last_at - first_request
        metrics["last_202_to_last_commit_s"] = clock.last_at - last_202
    return metrics


def _database(cfg: Settings, item: sale.Item) -> dict[str, Any]:
    with psycopg.connect(cfg.pg_dsn, autocommit=True) as conn:
        orders = conn.execute(
            "SELECT count(*), count(DISTINCT user_id),"
            " count(*) FILTER (WHERE status <> 'PENDING'),"
            " extract(epoch FROM max(updated_at) - min(created_at))"
            " FROM flash_sale_order WHERE item_id = %s",
            (item.item_id,),
        ).fetchone()
        stock = conn.execute(
            "SELECT quantity, sold FROM flash_sale_item WHERE id = %s", (item.item_id,)
        ).fetchone()
    assert orders is not None and stock is not None
    return {
        "orders_in_db": int(orders[0]),
        "distinct_buyers_in_db": int(orders[1]),
        "orders_not_pending": int(orders[2]),
        "db_first_created_to_last_stored_s": float(orders[3]) if orders[3] is not None else None,
        "quantity": int(stock[0]),
        "sold": int(stock[1]),
    }


def _stock_left(cfg: Settings, item: sale.Item) -> int:
    shards = sale.Shards(cfg)
    try:
        return sum(
            int(shards.client.get(shard_keys(item.item_id, k).stock) or 0)
            for k in range(item.shards)
        )
    finally:
        shards.close()


def _drop(cfg: Settings, items: tuple[sale.Item, ...]) -> None:
    shards = sale.Shards(cfg)
    try:
        for item in items:
            shards.drop(item)
    finally:
        shards.close()


def _problems(m: dict[str, Any], plan: Plan, all_answered: bool, clock: CommitClock) -> list[str]:
    problems = []
    if not all_answered or m["answered"] != plan.buyers:
        problems.append(f"{m['answered']} of {plan.buyers} buyers answered")
    if m["statuses"].get("202", 0) != plan.units:
        problems.append(f"{m['statuses'].get('202', 0)} 202s for {plan.units} units")
    unexpected = {k: v for k, v in m["statuses"].items() if k not in ("202", "410")}
    if unexpected:
        problems.append(f"answers other than 202 and 410: {unexpected}")
    if m["socket_errors"] or m["timeouts"]:
        problems.append(f"{m['socket_errors']} socket errors, {m['timeouts']} timeouts")
    if clock.last_at is None:
        problems.append(f"the writer stored {clock.count} of {plan.units} orders in time")
    if m["orders_in_db"] != plan.units:
        problems.append(f"{m['orders_in_db']} orders in the database for {plan.units} units")
    if m["distinct_buyers_in_db"] != m["orders_in_db"]:
        problems.append("a buyer holds two orders")
    if m["sold"] != m["quantity"]:
        problems.append(f"sold {m['sold']} of quantity {m['quantity']}")
    if m["redis_stock_left"] != 0:
        problems.append(f"{m['redis_stock_left']} units left on the shards in Redis")
    return problems


@dataclass(frozen=True, slots=True)
class SpikeOptions:
    """The sale and the crowd (``--spike-*``); the cores are the harness's."""

    units: int = option(10_000, "stock of the spike's item")
    buyers: int = option(200_000, "distinct buyers, each once")
    shards: int = option(8, "shards of the item")
    connections: int = option(256, "wrk connections")


def measure(ctx: Context, a: SpikeOptions, rec: Recorder) -> dict[str, Any]:
    o, repeats = ctx.opts, ctx.args.repeats
    plan = Plan(
        **dataclasses.asdict(a), server_core=o.server_core, load_core=o.load_core,
        writer_cores=o.all_cores, timeout_s=max(120.0, a.buyers / 500),
    )  # fmt: skip
    run = partial(run_once, ctx.cfg, plan, ctx.workdir, ctx.log_dir, tokens.BuyerIds())
    label = f"{plan.buyers:,} buyers for {plan.units:,} units"
    rec.repeats("spike", repeats, lambda r: [(label, ("spike", "gateway", r), run)], _spike_summary)
    return {**settings(plan), "repeats": repeats}


def _spike_summary(m: dict[str, Any]) -> str:
    last = m.get("first_purchase_to_last_commit_s")
    drained = f"{last:.2f} s first purchase → last commit" if last else "writer did not drain"
    sellout = m["sellout_s"] or 0.0
    return (
        f"{m['rps']:,.0f} req/s, p99 {m['p99_ms']:.1f} ms, sold out in {sellout:.2f} s, {drained}"
    )
