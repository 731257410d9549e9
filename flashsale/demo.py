"""``flashsale demo``: a whole flash sale on the local stack.

Starts a gateway and a writer, creates and arms a sale, releases a crowd of distinct buyers at
once, waits for the writer to drain, reconciles Redis with the database and prints a report.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
import asyncpg
import uvloop

from flashsale import http_retry
from flashsale.observe.fairness import write_fairness
from flashsale.observe.report import write_report
from flashsale.room_buyers import RoomClient
from flashsale.stack.processes import (
    LIFTED_IP_LIMITS,
    http_ready,
    process_group,
    settings_env,
    wait_ready,
)
from gateway.auth import sign_token
from jobs.reconcile import reconcile, render_table
from kernel.settings import Settings
from shard_router import ShardRouter

DEMO_PORT = 18188
ROOM_LEAD_S = 10  # --waiting-room: the sale starts this long after the crowd starts joining
READY_TIMEOUT_S = 30.0


async def _create_sale(
    session: aiohttp.ClientSession, cfg: Settings, units: int, shards: int, room: bool
) -> tuple[int, int]:
    """(sale id, item id) of a one-item sale, created and armed through the admin API; with a
    waiting room it starts ROOM_LEAD_S from now, so part of the crowd joins before."""
    admin = {"Authorization": f"Bearer {cfg.admin_token}"}
    now = dt.datetime.now(dt.UTC)
    body: dict[str, Any] = {
        "name": "demo",
        "startsAt": (now + dt.timedelta(seconds=ROOM_LEAD_S if room else 0)).isoformat(),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat(),
        "items": [{"productId": "demo-sku", "quantity": units, "price": 9900, "shards": shards}],
    }
    if room:
        body["waitingRoom"] = {}  # the gateway's default admission rate, no proof of work
    async with session.post("/admin/sales", json=body, headers=admin) as response:
        sale = await response.json()
        assert response.status == 201, sale
    async with session.post(f"/admin/sales/{sale['saleId']}/arm", headers=admin) as response:
        assert response.status == 200, await response.text()
    return int(sale["saleId"]), int(sale["items"][0]["itemId"])


async def _spike(
    session: aiohttp.ClientSession, cfg: Settings, item_id: int, buyers: int
) -> tuple[Counter[int], list[float], float]:
    first_user = int(time.time() * 1000) * 1000
    tokens = [sign_token(cfg, first_user + i) for i in range(buyers)]
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    queue: asyncio.Queue[str] = asyncio.Queue()
    for token in tokens:
        queue.put_nowait(token)

    async def buyer() -> None:
        while not queue.empty():
            token = queue.get_nowait()
            started = time.perf_counter()
            status, _, _ = await http_retry.answer(
                session,
                "POST",
                f"/api/flash-sales/items/{item_id}/purchase",
                {"Authorization": f"Bearer {token}"},
            )
            statuses[status] += 1
            latencies.append(time.perf_counter() - started)

    async def progress() -> None:
        while True:
            await asyncio.sleep(1)
            done = sum(statuses.values())
            print(
                f"\r  spike: {done}/{buyers} answered (202: {statuses[202]}, 410: {statuses[410]})",
                end="",
                flush=True,
            )

    started = time.perf_counter()
    ticker = asyncio.create_task(progress())
    await asyncio.gather(*(buyer() for _ in range(256)))
    ticker.cancel()
    elapsed = time.perf_counter() - started
    print(f"\r  spike: {buyers}/{buyers} answered in {elapsed:.1f}s{' ' * 30}")
    return statuses, latencies, elapsed


async def _room_spike(
    session: aiohttp.ClientSession, cfg: Settings, sale_id: int, item_id: int, buyers: int
) -> tuple[Counter[int], list[float], float]:
    """The crowd through the waiting room: each buyer joins (those before the start draw a
    random place at it), polls honouring Retry-After and buys once admitted. Answers are each
    buyer's last (202, or 410 once sold out); latencies from joining to that answer."""
    first_user = int(time.time() * 1000) * 1000
    client = RoomClient(session, cfg, sale_id, item_id)
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    held_at: list[float] = []

    # The crowd arrives over time rather than in one instant: one gateway process sheds a
    # 5,000-join burst (503 OVERLOADED) and the herd's retries come back together.
    joining = asyncio.Semaphore(64)

    async def buyer(user: int) -> None:
        started = time.perf_counter()
        async with joining:
            status, body = await client.join(user)
        if status == 200:
            outcome = await client.wait_and_buy(user, body["ticket"], held_at, timeout_s=300)
            status = outcome.last or status
        statuses[status] += 1
        latencies.append(time.perf_counter() - started)

    async def progress() -> None:
        while True:
            await asyncio.sleep(1)
            print(
                f"\r  room: {sum(statuses.values())}/{buyers} done (202: {statuses[202]}, "
                f"410: {statuses[410]})",
                end="",
                flush=True,
            )

    started = time.perf_counter()
    ticker = asyncio.create_task(progress())
    await asyncio.gather(*(buyer(first_user + i) for i in range(buyers)))
    ticker.cancel()
    elapsed = time.perf_counter() - started
    print(f"\r  room: {buyers}/{buyers} done in {elapsed:.1f}s{' ' * 30}")
    return statuses, latencies, elapsed


async def _drain(pool: asyncpg.Pool, item_id: int, accepted: int, timeout_s: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        stored = await pool.fetchval(
            "select count(*) from flash_sale_order where item_id = $1", item_id
        )
        if stored >= accepted:
            return time.perf_counter() - started
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the writer stored fewer than {accepted} orders in {timeout_s}s")


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else 0.0


async def _sale(cfg: Settings, buyers: int, units: int, shards: int, room: bool) -> int:
    base = f"http://127.0.0.1:{DEMO_PORT}"
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(base, connector=connector) as session:
        sale_id, item_id = await _create_sale(session, cfg, units, shards, room)
        print(
            f"demo: sale armed, item {item_id}: {units} units over {shards} shards; "
            + (
                f"{buyers} buyers join its waiting room, {ROOM_LEAD_S}s before the start"
                if room
                else f"{buyers} buyers press Buy"
            )
        )
        if room:
            statuses, latencies, elapsed = await _room_spike(session, cfg, sale_id, item_id, buyers)
        else:
            statuses, latencies, elapsed = await _spike(session, cfg, item_id, buyers)
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=4)
    router = ShardRouter(cfg)
    await router.start()
    try:
        drained = await _drain(pool, item_id, statuses[202], 120)
        reports = await reconcile(cfg, pool, router, [item_id])
        sold = await pool.fetchval("select sold from flash_sale_item where id = $1", item_id)
        stored = await pool.fetchval(
            "select count(*) from flash_sale_order where item_id = $1", item_id
        )
        twice = await pool.fetchval(
            "select count(*) from (select user_id from flash_sale_order where item_id = $1 "
            "group by user_id having count(*) > 1) t",
            item_id,
        )
        # The post-sale report: Prometheus scraped the demo's gateway and writer.
        _, png, summary = await write_report(cfg, pool, sale_id)
        if room:
            summary += (await write_fairness(cfg, pool, router, sale_id))[2]
    finally:
        await router.close()
        await pool.close()
    codes = ", ".join(f"{code}: {count}" for code, count in sorted(statuses.items()))
    print("\nreport")
    print(
        f"  requests        {sum(statuses.values())} in {elapsed:.1f}s "
        f"({sum(statuses.values()) / elapsed:.0f} req/s from one Python client)"
    )
    print(f"  answers         {codes}")
    print(
        f"  latency         p50 {_percentile(latencies, 0.5) * 1000:.1f} ms, "
        f"p99 {_percentile(latencies, 0.99) * 1000:.1f} ms "
        + ("(join to last answer)" if room else "(closed loop)")
    )
    print(f"  units sold      {sold} of {units}")
    print(f"  orders in db    {stored} (writer drained {drained:.1f}s after the spike)")
    print(f"  buyers twice    {twice}")
    print(render_table(reports))
    drift = sum(r.drift for r in reports)
    print(f"  drift           {drift}")
    print("\n".join(summary))
    print(f"  sale report     {png}")
    # A 503 is "could not confirm": its unit may still have been taken (the outbox relay then
    # delivers the order, and the buyer's status poll shows it), so 202s <= orders stored.
    ok = (
        drift == 0
        and sold == min(units, buyers) == stored
        and statuses[202] <= stored
        and twice == 0
        and not set(statuses) - {202, 409, 410, 429, 503}
    )
    print("demo: OK — sold exactly the stock, every 202 is one order" if ok else "demo: FAILED")
    return 0 if ok else 1


def run_demo(
    cfg: Settings, *, buyers: int, units: int, shards: int, waiting_room: bool = False
) -> int:
    env = settings_env(gateway_port=DEMO_PORT, **LIFTED_IP_LIMITS)
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    writer_log, gateway_log = cfg.log_dir / "demo-writer.log", cfg.log_dir / "demo-gateway.log"
    print(
        f"demo: starting a gateway on 127.0.0.1:{DEMO_PORT} and a writer "
        f"(logs in {cfg.log_dir}/demo-*.log)"
    )
    with (
        process_group([sys.executable, "-m", "writer"], log=writer_log, env=env),
        process_group([sys.executable, "-m", "gateway"], log=gateway_log, env=env) as gateway,
    ):
        ready = http_ready(f"http://127.0.0.1:{DEMO_PORT}/readyz")
        wait_ready(gateway, ready, READY_TIMEOUT_S, "the gateway", gateway_log)
        return uvloop.run(_sale(cfg, buyers, units, shards, waiting_room))
