"""What a purchase costs the database before it is known to be worth it: nothing for a request
without a valid token, and nothing for an item the catalog found missing a moment ago. Counted
by the catalog's own reads metric on a real gateway, and the shared read below it."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import asyncpg
import pytest

from gateway.auth import sign_token
from gateway.catalog import Catalog, CatalogQuery
from kernel.settings import Settings
from rig.http import client_session
from tests.support.gateway import running_gateway
from tests.support.workers import worker_port

PORT = worker_port(18411)  # this module's gateway
_READS = re.compile(r'^flashsale_catalog_reads_total\{catalog="catalog"\} ([0-9.e+]+)$', re.M)


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    # A long negative TTL, so "seen recently" holds for the whole test on a loaded machine.
    with running_gateway(live_stack, PORT, item_cache_seconds="30") as base:
        yield base


async def _reads(http: aiohttp.ClientSession) -> float:
    async with http.get("/metrics") as response:
        found = _READS.search(await response.text())
    return float(found.group(1)) if found else 0.0


async def _purchase(http: aiohttp.ClientSession, item: int, headers: dict[str, str]) -> int:
    async with http.post(f"/api/flash-sales/items/{item}/purchase", headers=headers) as response:
        return response.status


@pytest.mark.integration
async def test_no_read_without_a_token_nor_for_an_unknown_item_seen_recently(
    gateway: str, live_stack: Settings
) -> None:
    unknown = [random.randrange(10**12, 10**13) for _ in range(500)]
    async with client_session(gateway) as http:
        before = await _reads(http)
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            answers = await asyncio.gather(*(_purchase(http, i, headers) for i in unknown))
            assert Counter(answers) == {401: 500}
        assert await _reads(http) == before
        # Signed in: 200 buyers ask for one unknown item at once, then again: one read.
        item = unknown[0]
        tokens = [{"Authorization": f"Bearer {sign_token(live_stack, u)}"} for u in range(1, 201)]
        for _ in range(2):
            answers = await asyncio.gather(*(_purchase(http, item, t) for t in tokens))
            assert Counter(answers) == {404: 200}
        assert await _reads(http) == before + 1


@dataclass(frozen=True)
class _Row:
    key: str


class _SlowPool:
    """Counts reads; each read waits until released, so concurrent misses overlap."""

    def __init__(self) -> None:
        self.reads = 0
        self.release = asyncio.Event()

    async def fetchrow(self, query: str, key: str) -> dict[str, Any] | None:
        self.reads += 1
        await self.release.wait()
        return {"key": key} if key == "known" else None


async def test_concurrent_misses_of_one_key_share_one_read() -> None:
    pool = _SlowPool()
    query: CatalogQuery[str, _Row] = CatalogQuery(
        "one", "live", lambda r: _Row(r["key"]), lambda row: row.key, lambda row: False
    )
    catalog = Catalog(cast(asyncpg.Pool, pool), query, 60.0, "shared read test")
    waiting = [asyncio.ensure_future(catalog.get(k)) for k in ["known"] * 50 + ["gone"] * 50]
    await asyncio.sleep(0)  # every get() has started and is waiting on its key's read
    pool.release.set()
    found = await asyncio.gather(*waiting)
    assert found == [_Row("known")] * 50 + [None] * 50
    assert pool.reads == 2


@pytest.mark.integration
async def test_another_method_on_the_purchase_route_is_405_with_allow(gateway: str) -> None:
    async with client_session(gateway) as http:
        before = await _reads(http)
        for method in ("PUT", "GET", "DELETE", "PATCH"):
            path = "/api/flash-sales/items/1/purchase"
            async with http.request(method, path) as response:
                assert response.status == 405, method
                assert response.headers["Allow"] == "POST"
                assert await response.json() == {"error": "METHOD_NOT_ALLOWED"}
        assert await _reads(http) == before
