"""The failover watch reads the topology on one kept connection, not a new one every round; a
seed that fails is dropped for the next one at once. (Fakes for the Redis clients: what the
watch does against a real cluster is in test_redis_failover.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from jobs import redis_failover
from jobs.redis_failover import FailoverWatch
from kernel.settings import Settings

SEEDS = ("127.0.0.1:27001", "127.0.0.1:27002", "127.0.0.1:27003")
# CLUSTER NODES as redis-py parses it: one primary, no slots (so no probe is sent).
LISTED = {"127.0.0.1:27001@37001": {"node_id": "a", "flags": "master", "master_id": "-"}}


class FakeClient:
    def __init__(self, seed: str, made: list[FakeClient], dead: set[str]) -> None:
        self.seed, self.dead, self.calls, self.closed = seed, dead, 0, False
        made.append(self)

    async def cluster(self, *args: Any) -> dict[str, dict[str, Any]]:
        assert not self.closed
        self.calls += 1
        if self.seed in self.dead:
            raise RedisConnectionError("Connection reset by peer")
        return LISTED

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> tuple[list[FakeClient], set[str]]:
    clients: list[FakeClient] = []
    dead: set[str] = set()
    monkeypatch.setattr(
        redis_failover, "_client", lambda seed, timeout_s: FakeClient(seed, clients, dead)
    )
    return clients, dead


def test_the_topology_is_read_on_one_kept_connection(
    made: tuple[list[FakeClient], set[str]],
) -> None:
    clients, _ = made

    async def main() -> None:
        watch = FailoverWatch(Settings(redis_nodes=SEEDS))
        for _ in range(5):
            await watch.step()
        await watch.close()

    asyncio.run(main())
    assert [(c.seed, c.calls, c.closed) for c in clients] == [(SEEDS[0], 5, True)]


def test_a_kept_seed_that_fails_is_replaced_by_the_next_in_the_same_round(
    made: tuple[list[FakeClient], set[str]],
) -> None:
    clients, dead = made

    async def main() -> list[list[str]]:
        watch = FailoverWatch(Settings(redis_nodes=SEEDS))
        await watch.step()
        dead.add(SEEDS[0])  # the kept seed dies
        topologies = [[n.address for n in await watch._topology()] for _ in range(2)]  # noqa: SLF001
        await watch.close()
        return topologies

    topologies = asyncio.run(main())
    assert topologies == [["127.0.0.1:27001"]] * 2  # read from the next seed, both rounds
    # The dead seed's kept connection closed, and not asked again in its round; the next one
    # kept from then on.
    assert [(c.seed, c.calls, c.closed) for c in clients] == [
        (SEEDS[0], 2, True),
        (SEEDS[1], 2, True),
    ]
