"""The catalog cache every row type shares: hits stay in process, unknown keys are remembered
as missing for the TTL, the live rows follow the refresh, and a database failure is
CatalogUnavailable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import asyncpg
import pytest

from gateway.catalog import Catalog, CatalogQuery, CatalogUnavailable


@dataclass(frozen=True)
class Row:
    key: str
    live: bool


class FakePool:
    def __init__(self, rows: dict[str, bool]) -> None:
        self.rows = rows
        self.reads = 0
        self.down = False

    async def fetchrow(self, query: str, key: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.down:
            raise OSError("connection refused")
        return {"key": key, "live": self.rows[key]} if key in self.rows else None

    async def fetch(self, query: str) -> list[dict[str, Any]]:
        return [{"key": k, "live": live} for k, live in self.rows.items() if live]


_QUERY: CatalogQuery[str, Row] = CatalogQuery(
    one="one",
    live="live",
    row=lambda record: Row(record["key"], record["live"]),
    key=lambda row: row.key,
    is_live=lambda row: row.live,
)


def _catalog(pool: FakePool, max_rows: int = 100) -> Catalog[str, Row]:
    # Duck-typed: a catalog only calls fetchrow() and fetch().
    return Catalog(cast(asyncpg.Pool, pool), _QUERY, 60.0, "test catalog", max_rows)


async def test_a_row_is_read_once_then_served_from_the_cache() -> None:
    pool = FakePool({"a": False})
    catalog = _catalog(pool)
    assert catalog.cached("a") is None
    assert await catalog.get("a") == Row("a", False)
    assert await catalog.get("a") == Row("a", False)
    assert catalog.cached("a") == Row("a", False)
    assert pool.reads == 1


async def test_an_unknown_key_is_remembered_as_missing_until_a_row_appears() -> None:
    pool = FakePool({})
    catalog = _catalog(pool)
    assert await catalog.get("x") is None
    assert await catalog.get("x") is None
    assert pool.reads == 1
    catalog.remember(Row("x", False))  # written meanwhile (the admin's create)
    assert await catalog.get("x") == Row("x", False)


async def test_the_live_rows_follow_the_refresh_and_the_rows_read_meanwhile() -> None:
    pool = FakePool({"l1": True, "l2": True, "o": False})
    catalog = _catalog(pool)
    told: list[int] = []
    catalog.on_refresh.append(lambda: told.append(1))
    await catalog.refresh()
    assert sorted(r.key for r in catalog.live()) == ["l1", "l2"]
    assert told == [1]
    assert catalog.cached("l1") == Row("l1", True)
    pool.rows["l3"] = True
    await catalog.get("l3")
    await catalog.get("o")
    assert sorted(r.key for r in catalog.live()) == ["l1", "l2", "l3"]
    del pool.rows["l1"]
    await catalog.refresh()
    assert sorted(r.key for r in catalog.live()) == ["l2", "l3"]


async def test_a_database_failure_is_catalog_unavailable() -> None:
    pool = FakePool({"a": True})
    pool.down = True
    with pytest.raises(CatalogUnavailable):
        await _catalog(pool).get("a")


async def test_the_cache_is_bounded() -> None:
    pool = FakePool({str(i): False for i in range(10)})
    catalog = _catalog(pool, max_rows=4)
    for i in range(10):
        await catalog.get(str(i))
    assert sum(catalog.cached(str(i)) is not None for i in range(10)) <= 4
