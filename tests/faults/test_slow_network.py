"""Slow-network rows of the fault matrix: Redis, then PostgreSQL, reached through a TCP proxy that
adds latency mid-sale (tests/support/fault_proxy.py), under the whole system and a steady load.

Redis Cluster clients learn the nodes' addresses from the cluster itself, so each node is made to
announce its proxy's port (``cluster-announce-port``) for the row: every client, the gateway's
included, then reaches it through the proxy; the cluster bus stays direct.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import pytest

from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from tests.faults.conftest import FAULTS_PORT, RATE, SHARDS, show
from tests.faults.redis_nodes import announced
from tests.support.constants import REDIS_TIMEOUT_MS
from tests.support.fault_proxy import ProxyGroup, proxied
from tests.support.system import System
from tests.support.system_load import Answer, OpenLoad

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

# A node's proxy listens on its port + 50 (7101 -> 7151): between one stack's nodes and the
# next one's (tests/support/workers.py moves a stack's by 100).
PROXY_PORT_OFFSET = 50
# PostgreSQL's proxy: a fixed port below the ephemeral range (32768+), where an outgoing
# connection's local port could already hold it.
PG_PROXY_PORT = FAULTS_PORT + 10
QUANTITY = 2000
DURATION_S = 16.0
# (from, latency each way): a little slow, slow but within the Redis deadline (1 s), far past it,
# then healthy again. WAIT crosses the slowed links twice more (to the replica and back).
REDIS_STEPS = ((3.0, 0.01), (6.0, 0.05), (9.0, 0.6), (12.0, 0.0))
ABSORBED = 0.01  # a latency the sale must absorb: no 503 UNAVAILABLE while it lasts
RECOVERY_S = 2.0  # once the network is healthy again, the sale sells within this
PG_STEPS = ((4.0, 0.25), (10.0, 0.0))


def _shifted(address: str) -> str:
    host, port = address.rsplit(":", 1)
    return f"{host}:{int(port) + PROXY_PORT_OFFSET}"


def _drive(load: OpenLoad, proxies: ProxyGroup, steps: Sequence[tuple[float, float]]) -> None:
    for at_s, latency_s in steps:
        load.sleep_until(at_s)
        proxies.set_latency(latency_s)


def _phases(
    answers: list[Answer], steps: Sequence[tuple[float, float]]
) -> list[tuple[str, Counter[str]]]:
    """Per latency step: its description (with the slowest answer and the last 503 UNAVAILABLE)
    and the statuses, a 503 with its code, of the requests due in it."""
    bounds = [*(at for at, _ in steps), float("inf")]
    phases = []
    for (at_s, latency_s), end_s in zip(steps, bounds[1:], strict=True):
        part = [a for a in answers if at_s <= a.due_s < end_s]
        counts = Counter(a.label for a in part)
        slowest = max((a.latency_s for a in part), default=0.0)
        shed = [a.due_s for a in part if a.label == "503 UNAVAILABLE"]
        last = f", last 503 UNAVAILABLE due at {max(shed):.1f}s" if shed else ""
        what = f"+{latency_s * 1000:.0f} ms each way from {at_s:.0f}s: {dict(counts)}"
        phases.append((f"{what}, slowest {slowest:.2f}s{last}", counts))
    return phases


def _unavailable(answers: list[Answer], start_s: float, end_s: float) -> int:
    return sum(a.label == "503 UNAVAILABLE" and start_s <= a.due_s < end_s for a in answers)


def test_redis_slowed_by_a_latency_adding_proxy(whole: Settings) -> None:
    routes = [(_shifted(a), a) for a in whole.redis_nodes]
    ports = {a: int(_shifted(a).rsplit(":", 1)[1]) for a in whole.redis_nodes}
    env = settings_env(redis_nodes=tuple(listen for listen, _ in routes))
    with proxied(routes) as proxies, announced(whole, ports):
        with System(whole, "redis-slow-proxy", port=FAULTS_PORT, env=env) as system:
            sale = system.sale(QUANTITY, SHARDS)
            load = system.load(sale, rate=RATE, duration_s=DURATION_S)
            _drive(load, proxies, REDIS_STEPS)
            answers = load.result()
            report = system.check(sale, answers, calm_until_s=REDIS_STEPS[0][0])
    show(report, *(line for line, _ in _phases(answers, REDIS_STEPS)))
    report.assert_kept()
    absorbed = next(i for i, (_, latency) in enumerate(REDIS_STEPS) if latency == ABSORBED)
    # A request due within a deadline of the next step meets that step's latency.
    start, end = REDIS_STEPS[absorbed][0], REDIS_STEPS[absorbed + 1][0] - REDIS_TIMEOUT_MS / 1000
    healed = REDIS_STEPS[-1][0] + RECOVERY_S
    shed_absorbing = _unavailable(answers, start, end)
    shed_healed = _unavailable(answers, healed, DURATION_S)
    if report.pressured:
        # A starved machine misses the Redis deadline without any proxy: measured, reported.
        print(
            f"not asserted at {report.cpu_pressure:.0%} CPU pressure: 503s while +10 ms:"
            f" {shed_absorbing}, after healing: {shed_healed}"
        )
        return
    assert shed_absorbing == 0, f"+{ABSORBED * 1000:.0f} ms was not absorbed"
    assert shed_healed == 0, "no recovery once the network healed"


def _proxied_dsn(dsn: str) -> tuple[str, tuple[str, str]]:
    """The DSN through a proxy, and the proxy's (listen, target)."""
    parts = urlsplit(dsn)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    listen = f"{host}:{PG_PROXY_PORT}"
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{PG_PROXY_PORT}"
    return urlunsplit(parts._replace(netloc=netloc)), (listen, f"{host}:{port}")


def test_postgres_slowed_by_a_latency_adding_proxy(whole: Settings) -> None:
    dsn, route = _proxied_dsn(whole.pg_dsn)
    with proxied([route]) as proxies:
        env = settings_env(pg_dsn=dsn)
        with System(whole, "postgres-slow-proxy", port=FAULTS_PORT, env=env) as system:
            sale = system.sale(QUANTITY, SHARDS)
            load = system.load(sale, rate=RATE, duration_s=DURATION_S)
            _drive(load, proxies, PG_STEPS)
            answers = load.result()
            report = system.check(sale, answers, calm_until_s=PG_STEPS[0][0])
    show(report, *(line for line, _ in _phases(answers, PG_STEPS)))
    report.assert_kept()
