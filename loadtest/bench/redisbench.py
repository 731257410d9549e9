"""One Redis core running the reserve script: ``redis-benchmark`` EVALSHA of lua/reserve.lua, one
request per round trip (``-P 1``) and 16 per round trip (``-P 16``), every call a new buyer
(``__rand_int__``), so every call takes the write path (DECR + 3 HSET).

The keys carry one hash tag owned by the measured node. Afterwards the dedup hash is counted (to
prove the calls reserved, not errored: redis-benchmark counts error replies as requests) and
the keys are deleted.
"""

from __future__ import annotations

import csv
import subprocess
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.crc import key_slot

from kernel.events import OrderPlaced, encode
from loadtest.bench.servers import pinned
from shard_router.scripts import RESERVE

STOCK = 1_000_000_000
RANDOM_RANGE = 1_000_000_000  # redis-benchmark reads it with atoi: stay below 2**31
CSV_TAIL = (
    "rps",
    "avg_latency_ms",
    "min_latency_ms",
    "p50_latency_ms",
    "p95_latency_ms",
    "p99_latency_ms",
    "max_latency_ms",
)


@dataclass(frozen=True, slots=True)
class Node:
    name: str  # how the report names it
    port: int
    cluster: bool


def stack_primary(ports: list[int]) -> int:
    """The first of ``ports`` that is a cluster primary owning slots."""
    for port in ports:
        with Redis(port=port, socket_timeout=5) as client:
            if client.info("replication")["role"] == "master" and _slot_ranges(client):
                return port
    raise RuntimeError("no Redis Cluster primary found")


def _slot_ranges(client: Redis) -> list[tuple[int, int]]:
    raw = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    myself = [line.split() for line in text.splitlines() if "myself" in line.split()[2]]
    ranges: list[tuple[int, int]] = []
    for part in myself[0][8:] if myself else []:
        if part.startswith("["):
            continue  # a slot being migrated
        low, _, high = part.partition("-")
        ranges.append((int(low), int(high or low)))
    return ranges


def _tag(node: Node, client: Redis) -> str:
    if not node.cluster:
        return "{loadtest:redisbench}"
    ranges = _slot_ranges(client)
    for n in range(100_000):
        tag = f"{{loadtest:redisbench:{n}}}"
        slot = key_slot(tag.encode())
        if any(low <= slot <= high for low, high in ranges):
            return tag
    raise RuntimeError(f"no hash tag found for {node.name}")


def run(node: Node, pipeline: int, calls: int, clients: int, core: int) -> dict[str, Any]:
    """One redis-benchmark run of ``calls`` reserve calls against ``node``: EVALSHA/s, p50 and
    p99, the calls and how many reserved."""
    with Redis(port=node.port, socket_timeout=30) as client:
        tag = _tag(node, client)
        keys = [f"{tag}:{name}" for name in ("stock", "buyers", "orders", "outbox")]
        client.unlink(*keys)
        client.script_load(RESERVE.source)
        client.set(keys[0], STOCK)
        probe = client.evalsha(RESERVE.sha, 4, *keys, "probe-user", "probe-order", b"{}")
        if int(probe[0]) != 0:
            raise RuntimeError(f"reserve script probe returned {probe!r}")
        payload = encode(OrderPlaced("0" * 36, 1, 1, 0, 0, 1_700_000_000_000, 1_700_000_600_000))
        argv = [
            "redis-benchmark", "-h", "127.0.0.1", "-p", str(node.port), "-n", str(calls),
            "-c", str(clients), "-P", str(pipeline), "-r", str(RANDOM_RANGE), "--csv",
            "EVALSHA", RESERVE.sha, "4", *keys, "__rand_int__", "order-__rand_int__",
            payload.decode(),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                pinned(core, argv), capture_output=True, text=True, timeout=600, check=False
            )
            if done.returncode != 0:
                raise RuntimeError(f"redis-benchmark exit {done.returncode}: {done.stderr[-500:]}")
            reserved = int(client.hlen(keys[1])) - 1  # minus the probe
        finally:
            client.unlink(*keys)
    # The CSV's first column is the command, payload quotes and all: read the row from its end.
    rows = [row for row in csv.reader(done.stdout.splitlines()) if len(row) >= 8]
    if len(rows) < 2 or rows[0][-7:] != list(CSV_TAIL):
        raise RuntimeError(f"unexpected redis-benchmark CSV: {done.stdout[-500:]}")
    row = dict(zip(CSV_TAIL, rows[-1][-7:], strict=True))
    return {
        "ops_per_s": float(row["rps"]),
        "p50_ms": float(row["p50_latency_ms"]),
        "p99_ms": float(row["p99_latency_ms"]),
        "calls": calls,
        "reserved": reserved,
    }
