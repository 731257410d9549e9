"""Fixtures of the shard router's tests: a Redis Cluster of their own (minicluster.py) for the
tests that pause nodes or redirect calls, and routers built with other settings."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from kernel.settings import Settings
from shard_router import ShardRouter
from tests.shard_router.minicluster import MiniCluster, mini_cluster
from tests.support.tiers import server_fixture

RouterFactory = Callable[..., AbstractAsyncContextManager[ShardRouter]]


@server_fixture(scope="session")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    with mini_cluster(tmp_path_factory.mktemp("minicluster")) as cluster:
        yield cluster


def _router_factory(base: Settings) -> RouterFactory:
    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[ShardRouter]:
        router = ShardRouter(dataclasses.replace(base, **overrides))
        await router.start()
        try:
            yield router
        finally:
            await router.close()

    return make


@pytest.fixture
def mini_router(cfg: Settings, mini: MiniCluster) -> RouterFactory:
    """``async with mini_router(**settings) as router``: a router on the mini cluster."""
    return _router_factory(dataclasses.replace(cfg, redis_nodes=mini.nodes))


@pytest.fixture
def router_with(live_stack: Settings) -> RouterFactory:
    """``async with router_with(**settings) as router``: a router on the shared stack."""
    return _router_factory(live_stack)
