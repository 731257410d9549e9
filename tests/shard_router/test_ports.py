"""The Redis side satisfies the ports the domain declares (domain/ports.py), structurally."""

from __future__ import annotations

from domain.ports import ArmableShards, UnitReleaser, UseReleaser, VoucherLoader
from shard_router import ShardRouter, VoucherStore


def test_shard_router_and_voucher_store_are_the_domains_ports(
    router: ShardRouter, voucher_store: VoucherStore
) -> None:
    # mypy checks this assignment: a method the domain calls that is renamed, or whose signature
    # changes, on either side fails the type check, whichever call sites exist.
    ports: tuple[ArmableShards, UnitReleaser, VoucherLoader, UseReleaser] = (
        router,
        router,
        voucher_store,
        voucher_store,
    )
    assert ports[2].router is router
