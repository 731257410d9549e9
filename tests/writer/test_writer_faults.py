"""The writer under faults: SIGKILLed at its failpoints, PostgreSQL unreachable for a while."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest

from kernel.events import OrderPlaced, encode
from kernel.settings import PROJECT_ROOT, Settings
from rig.waiting import until
from tests.support.workers import stack_overlay, this_worker
from tests.support.writer import (
    Message,
    Topics,
    drain,
    make_item,
    messages,
    order,
    produce,
    rows,
    snapshot,
    topics,
)
from writer.metrics import REGISTRY

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(120)]

PROCESS_TIMEOUT_S = 60.0


def _sale(item: int) -> list[Message]:
    """The same sale for any item: 120 buyers, one of them twice, ten messages delivered twice,
    one poison message. Deterministic: every message's partition and order within it is fixed."""
    events = [order(item, user) for user in range(1, 121)]
    again = order(item, 4)  # user 4's first order is on partition 3 (index 3): same partition
    batch = messages(events)
    batch.append((again.order_id.encode(), encode(again), 3))
    batch += [(k, v, p) for k, v, p in batch[10:20]]
    batch.append((b"poison", b"not json", 2))
    return batch


async def _writer_process(t: Topics, *, failpoint: str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHSALE_")}
    # Back: this xdist worker's own stack (without it a second worker's writer read the first
    # worker's Kafka, found no such topic and stopped at once).
    env |= stack_overlay(this_worker(), env)
    env |= {
        "FLASHSALE_ORDERS_TOPIC": t.orders,
        "FLASHSALE_DEADLETTER_TOPIC": t.deadletter,
        "FLASHSALE_WRITER_GROUP": t.cfg.writer_group,
        "FLASHSALE_WRITER_BATCH_SIZE": "16",
        "PYTHONUNBUFFERED": "1",
    }
    if failpoint is not None:
        env["FLASHSALE_FAILPOINTS"] = failpoint
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "writer",
        "--once",
        "--metrics-port",
        "-1",
        cwd=PROJECT_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), PROCESS_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.parametrize("failpoint", ["writer.after_commit", "writer.before_commit"])
async def test_a_writer_killed_at_a_failpoint_then_restarted_equals_a_clean_run(
    live_stack: Settings, db: asyncpg.Pool, failpoint: str
) -> None:
    async with topics(live_stack) as clean, topics(live_stack) as crashed:
        clean_item = await make_item(db, quantity=500)
        await produce(clean.cfg, clean.orders, _sale(clean_item))
        await drain(clean.cfg)
        expected = await snapshot(db, clean_item)
        assert expected[0] == 120 and len(expected[1]) == 121

        item = await make_item(db, quantity=500)
        await produce(crashed.cfg, crashed.orders, _sale(item))
        code, out = await _writer_process(crashed, failpoint=failpoint)
        assert code == -signal.SIGKILL, out
        stored = len(await rows(db, item))
        if failpoint == "writer.before_commit":
            assert stored == 0  # the first batch's transaction died with the process
        else:
            assert 0 < stored < 121  # the first batch is stored, its offsets never committed

        code, out = await _writer_process(crashed, failpoint=None)
        assert code == 0, out

        assert await snapshot(db, item) == expected


class FlakyProxy:
    """A TCP proxy in front of PostgreSQL that can be down: then it closes every connection,
    new and established, as a restarting server would."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.up = False
        self.refused = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        self.down()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def down(self) -> None:
        self.up = False
        for writer in list(self._open):
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            self.refused += 1
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._open |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._open -= {writer, up_writer}
            for w in (writer, up_writer):
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def flaky_postgres(cfg: Settings) -> AsyncIterator[tuple[FlakyProxy, str]]:
    host_port = cfg.pg_dsn.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    proxy = FlakyProxy((host, int(port)))
    local = await proxy.start()
    dsn = cfg.pg_dsn.replace(f"@{host_port}/", f"@127.0.0.1:{local}/")
    try:
        yield proxy, dsn
    finally:
        await proxy.close()


def _db_retries() -> float:
    return REGISTRY.get_sample_value("flashsale_writer_retries_total", {"step": "db"}) or 0.0


async def test_postgres_unreachable_is_retried_and_nothing_is_lost(
    live_stack: Settings, db: asyncpg.Pool
) -> None:
    async with topics(live_stack) as t, flaky_postgres(live_stack) as (proxy, dsn):
        item = await make_item(db, quantity=100)
        events: list[OrderPlaced] = [order(item, user) for user in range(1, 81)]
        await produce(t.cfg, t.orders, messages(events))
        retries_before = _db_retries()

        writer = asyncio.create_task(drain(t.writer(pg_dsn=dsn)))
        await until(lambda: _db_retries() >= retries_before + 3 or writer.done())
        assert not writer.done()
        assert await rows(db, item) == {}  # nothing stored, nothing committed, still trying
        proxy.up = True
        await writer

        stored = await rows(db, item)
        assert {r["status"] for r in stored.values()} == {"PENDING"}
        assert set(stored) == {e.order_id for e in events}
        assert proxy.refused >= 3
