"""What the domain needs from Redis, declared here so that the domain never imports the Redis
side: shard_router's ShardRouter and VoucherStore satisfy these protocols structurally, and the
process packages hand them in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

HoldRecords = list[tuple[str, int]]  # (orderId, the buyer or customer holding its unit)
BuyerEntries = list[tuple[int, str]]  # (userId, orderId): the buyers' dedup entries


class ClusterReadiness(Protocol):
    """Is the cluster fit to open a sale on: replicas in sync, every script on every primary."""

    async def replicas_in_sync(self) -> dict[str, bool]: ...

    async def load_scripts(self) -> None: ...

    async def scripts_loaded_everywhere(self) -> bool: ...


class UnitReleaser(Protocol):
    async def release(
        self, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
    ) -> bool:
        """Give an ended order's unit back (once); whether it went back now."""
        ...


class ShardLoader(Protocol):
    """An item's stock shards as warm-up reads and rebuilds them."""

    async def outbox(self, item_id: int, shard: int) -> Mapping[str, bytes]: ...

    async def holds(self, item_id: int, shard: int) -> Mapping[str, int]: ...

    async def load_shard(
        self, item_id: int, shard: int, units: int, holds: HoldRecords, buyers: BuyerEntries
    ) -> None: ...


class ArmableShards(ClusterReadiness, ShardLoader, Protocol):
    """What arming a sale needs: the readiness checks, then each item's shards."""


class UseReleaser(Protocol):
    async def release(self, code: str, order_id: str, *, ended: bool = True) -> bool:
        """Give an ended flash voucher use back (once); whether it went back now."""
        ...


class VoucherLoader(Protocol):
    """A flash voucher as warm-up reads and rebuilds it."""

    @property
    def router(self) -> ClusterReadiness: ...

    async def outbox(self, code: str) -> Mapping[str, bytes]: ...

    async def holds(self, code: str) -> Mapping[str, int]: ...

    async def load(
        self, code: str, remaining: int, holds: HoldRecords, ended: HoldRecords
    ) -> None: ...
