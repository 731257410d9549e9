"""Bursts and overload at one real gateway on the real stack: a burst the gateway answers within
a second at its measured rate is queued, not shed; a sustained overload is shed.

Every bound comes from the gateway's reserve rate measured at the start of the same run (a short
closed loop): the machine is shared, and its rate varies several-fold from one minute to the
next. The figures are printed (``pytest -s`` shows them)."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from loadtest.generators import vegeta
from rig.sale import LIFTED_IP_LIMITS
from tests.support.gateway import new_sale, running_gateway
from tests.support.system import fresh_buyers

pytestmark = pytest.mark.integration

BURSTS_PORT = 18341
RATE_CONNECTIONS, RATE_S = 128, 2.0
BURST_OF_S = 0.5  # a burst of what the gateway answers in half a second
MAX_SHED = 0.01
MAX_SEND_SPREAD_S = 0.2  # the client writes the whole burst within a fifth of its second
OVERLOAD, OVERLOAD_S, OVERLOAD_CONNECTIONS = 4, 3.0, 2048
VEGETA = shutil.which("vegeta") or str(Path(sys.executable).parent / "vegeta")


@dataclass(frozen=True, slots=True)
class Target:
    cfg: Settings
    base: str
    item_id: int

    def request(self, buyer: int) -> bytes:
        return (
            f"POST /api/flash-sales/items/{self.item_id}/purchase HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {sign_token(self.cfg, buyer)}\r\nContent-Length: 0\r\n\r\n"
        ).encode()


@pytest.fixture(scope="module")
def target(live_stack: Settings) -> Iterator[Target]:
    # The burst's connections are all open before its first byte: on a busy box opening a
    # thousand takes seconds, past the 2 s a connection may idle before its request.
    env = settings_env(**LIFTED_IP_LIMITS, gateway_header_timeout_ms=30000)
    with running_gateway(live_stack, BURSTS_PORT, **env) as base:
        # Stock for every request of the module: nothing is ever sold out.
        item_id = new_sale(base, 10_000_000, 4)["items"][0]["itemId"]
        yield Target(live_stack, base, item_id)


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"content-length: (\d+)", head.lower())
    assert length is not None, head
    return int(head[9:12]), await reader.readexactly(int(length.group(1)))


async def _open(count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return list(
        await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", BURSTS_PORT) for _ in range(count))
        )
    )


async def _reserve_rate(target: Target) -> float:
    """202s a second, closed loop over RATE_CONNECTIONS keep-alive connections."""
    buyers = iter(fresh_buyers(100_000))
    accepted = 0
    streams = await _open(RATE_CONNECTIONS)
    started = time.monotonic()
    until = started + RATE_S

    async def lane(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        while time.monotonic() < until:
            writer.write(target.request(next(buyers)))
            status, _ = await _answer(reader)
            accepted += status == 202

    await asyncio.gather(*(lane(r, w) for r, w in streams))
    elapsed = time.monotonic() - started
    for _, writer in streams:
        writer.close()
    return accepted / elapsed


@dataclass(frozen=True, slots=True)
class Burst:
    statuses: Counter[int]
    errors: Counter[bytes]
    send_spread_s: float
    answered_in_s: float


async def _burst(target: Target, count: int) -> Burst:
    """``count`` buyers, one new connection each, all opened first; then every request is
    written back to back (the barrier: nothing else runs between the writes)."""
    requests = [target.request(buyer) for buyer in fresh_buyers(count)]
    streams = await _open(count)
    answered = [0.0] * count

    async def answer(i: int) -> tuple[int, bytes]:
        got = await _answer(streams[i][0])
        answered[i] = time.monotonic()
        streams[i][1].close()
        return got

    readers = [asyncio.ensure_future(answer(i)) for i in range(count)]
    await asyncio.sleep(0)  # the readers wait on their sockets before the first byte goes out
    first = time.monotonic()
    for (_, writer), request in zip(streams, requests, strict=True):
        writer.write(request)
    spread = time.monotonic() - first
    answers = await asyncio.gather(*readers)
    return Burst(
        Counter(status for status, _ in answers),
        Counter(body for status, body in answers if status != 202),
        spread,
        max(answered) - first,
    )


async def _rate_then_burst(target: Target) -> tuple[float, int, Burst]:
    rate = await _reserve_rate(target)
    size = max(20, round(rate * BURST_OF_S))
    return rate, size, await _burst(target, size)


def test_a_burst_the_gateway_answers_in_half_a_second_is_queued_not_shed(target: Target) -> None:
    rate, size, burst = asyncio.run(_rate_then_burst(target))
    shed = burst.statuses[503] / size
    print(
        f"\nreserve rate {rate:.0f} 202/s ({RATE_CONNECTIONS} connections, closed loop); "
        f"burst of {size}: {dict(burst.statuses)}, sent within {burst.send_spread_s * 1000:.0f}"
        f" ms, answered within {burst.answered_in_s:.2f} s, {shed:.1%} shed {dict(burst.errors)}"
    )
    assert burst.send_spread_s <= MAX_SEND_SPREAD_S, "the client, not the gateway, spread it"
    assert set(burst.statuses) <= {202, 503}, burst.errors
    assert shed <= MAX_SHED


@dataclass(frozen=True, slots=True)
class Overload:
    rate: float
    offered: int
    statuses: Counter[int]
    accepted_p99_s: float
    refused_p99_s: float
    goodput: float


def _overload(target: Target, workdir: Path) -> Overload:
    rate = asyncio.run(_reserve_rate(target))
    offered = max(100, round(rate * OVERLOAD))
    url = f"{target.base}/api/flash-sales/items/{target.item_id}/purchase"
    tokens = (sign_token(target.cfg, b).encode() for b in fresh_buyers(offered * 4))
    targets = vegeta.targets(workdir / "targets", url, tokens)
    results = workdir / "results.bin"
    attack = vegeta.start(
        VEGETA,
        url,
        rate=offered,
        seconds=OVERLOAD_S,
        core="0,1",
        connections=OVERLOAD_CONNECTIONS,
        results=results,
        target_file=targets,
        timeout_s=15,
    )
    hits = vegeta.finish(VEGETA, attack, results, OVERLOAD_S + 60)
    start = vegeta.start_ns(hits, offered)

    def late_s(hit: vegeta.Hit) -> float:  # from when it was due: open loop
        return (hit.sent_ns + hit.latency_ns - start - hit.seq * 1e9 / offered) / 1e9

    accepted = sorted(late_s(h) for h in hits if h.code == 202)
    last_202_s = max((h.sent_ns + h.latency_ns - start) / 1e9 for h in hits if h.code == 202)
    refused = sorted(late_s(h) for h in hits if h.code == 503)
    return Overload(
        rate,
        offered,
        Counter(h.code for h in hits),
        vegeta.percentile(accepted, 99),
        vegeta.percentile(refused, 99),
        len(accepted) / last_202_s,
    )


@pytest.fixture(scope="module")
def overload(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Overload:
    assert Path(VEGETA).exists(), f"no vegeta at {VEGETA}: scripts/bootstrap builds it"
    run = _overload(target, tmp_path_factory.mktemp("overload"))
    print(
        f"\nreserve rate {run.rate:.0f} 202/s; offered {run.offered}/s ({OVERLOAD}×) for "
        f"{OVERLOAD_S:g} s: {dict(run.statuses)}, goodput {run.goodput:.0f} 202/s, accepted "
        f"p99 {run.accepted_p99_s:.2f} s, refused p99 {run.refused_p99_s:.2f} s (from due time)"
    )
    return run


def test_a_sustained_overload_is_shed(overload: Overload) -> None:
    # Measured and printed, not asserted: accepted answers come 1.5-3 s after they were due
    # at 3-4x (the queue forms in granian before admission sees a request), past admission's
    # 1 s budget; docs/reliability.md's overload row states it as not met.
    assert overload.statuses[503] > 0
    assert set(overload.statuses) <= {202, 503}, overload.statuses
    # Goodput stays near the measured rate (half of it: the rate itself swings on this box).
    assert overload.goodput >= overload.rate / 2
