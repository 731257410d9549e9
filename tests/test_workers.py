"""Each xdist worker's stack and test ports (tests/support/workers.py) never meet another's."""

from __future__ import annotations

import pytest

from kernel.settings import Settings, load_settings
from rig.ports import CLUSTER_PORTS, REDIS_BUS_OFFSET
from tests.support.workers import (
    TEST_PORTS,
    WORKER_VARIABLE,
    apply_worker_overlay,
    stack_overlay,
    worker_port,
)

WORKERS = range(8)


def _settings(index: int) -> Settings:
    return load_settings(stack_overlay(index, {}))


def _listeners(cfg: Settings) -> set[int]:
    """Every port the worker's stack and its fixed processes listen on."""
    redis = {int(a.rsplit(":", 1)[1]) for a in cfg.redis_nodes}
    first_broker = int(cfg.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])
    kafka = {first_broker + 2 * n for n in range(3)}
    controllers = {cfg.kafka_controller_port + 2 * n for n in range(3)}
    return (
        redis
        | {port + REDIS_BUS_OFFSET for port in redis}
        | kafka
        | controllers
        | {cfg.pg_port, cfg.prometheus_port, cfg.redis_exporter_port, cfg.gateway_port}
        | {cfg.writer_metrics_port, cfg.reconcile_metrics_port}
        | {cfg.fleet_balancer_port, cfg.fleet_balancer_port + 1}
    )


def test_the_first_worker_uses_the_stack_stack_up_starts() -> None:
    assert stack_overlay(0, {}) == {}
    assert _settings(0) == Settings()


def test_no_two_workers_share_a_port_a_state_directory_or_a_fleet() -> None:
    seen: dict[int, int] = {}
    for index in WORKERS:
        cfg = _settings(index)
        for port in _listeners(cfg):
            assert 0 < port < 65536
            assert seen.setdefault(port, index) == index, f"port {port}: {seen[port]}, {index}"
    configs = [_settings(index) for index in WORKERS]
    for field in ("state_dir", "fleet_name", "fleet_subnet", "pg_dsn", "prometheus_url"):
        values = [getattr(cfg, field) for cfg in configs]
        assert len(set(values)) == len(values), field


def test_a_stack_listens_clear_of_the_throwaway_clusters_and_the_test_ports() -> None:
    clusters = set(CLUSTER_PORTS) | {p + REDIS_BUS_OFFSET for p in CLUSTER_PORTS}
    for index in WORKERS:
        ports = _listeners(_settings(index)) - {_settings(index).fleet_balancer_port}
        ports.discard(_settings(index).fleet_balancer_port + 1)
        assert not ports & clusters, index
        assert not ports & set(TEST_PORTS), index


def test_each_worker_has_a_block_of_test_ports_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = []
    for index in WORKERS:
        monkeypatch.setenv(WORKER_VARIABLE, f"gw{index}")
        block = {worker_port(port) for port in TEST_PORTS}
        assert all(0 < port < 65536 for port in block)
        if index:
            assert min(block) > 60999, "inside the kernel's ephemeral ports"
        blocks.append(block)
    for i, block in enumerate(blocks):
        for other in blocks[i + 1 :]:
            assert not block & other
        stacks = set().union(*(_listeners(_settings(index)) for index in WORKERS))
        assert not block & stacks
    with pytest.raises(ValueError):
        worker_port(8088)


def test_the_overlay_lands_in_the_environment_the_children_inherit() -> None:
    environ = {WORKER_VARIABLE: "gw2"}
    assert apply_worker_overlay(environ) == 2
    assert load_settings(environ).redis_nodes == _settings(2).redis_nodes != Settings().redis_nodes
    plain: dict[str, str] = {}
    assert apply_worker_overlay(plain) == 0 and plain == {}
