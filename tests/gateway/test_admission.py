"""Admission: a request that waited in the event loop past the target, or arrives while the
loop is behind, is refused 503 OVERLOADED before any work, and the gate opens again as soon as
the loop keeps up. First on a real uvloop loop, then through a real gateway."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest
import uvloop

from gateway.admission import REFUSED, TICK_S, Admission
from kernel.settings import Settings
from rig.sale import LIFTED_IP_LIMITS
from tests.support.gateway import new_sale, running_gateway

ADMISSION_PORT = 18093
TARGET_S, INTERVAL_S = 0.005, 0.03


def _busy(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


async def _next_turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(TICK_S * 2)


def test_a_request_that_waited_past_the_target_is_refused() -> None:
    uvloop.run(_waited())  # the gateway's loop: its turn order is what admission relies on


def test_a_loop_behind_for_an_interval_refuses_until_it_keeps_up() -> None:
    uvloop.run(_behind())


async def _waited() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.start()
    try:
        await _next_turns()
        loop = asyncio.get_running_loop()
        verdicts: list[bool] = []
        # Three requests queued in one turn behind 8 ms of work: the first one started in time.
        loop.call_soon(lambda: verdicts.append(gate.admit()))
        loop.call_soon(_busy, 0.008)
        loop.call_soon(lambda: verdicts.append(gate.admit()))
        loop.call_soon(lambda: verdicts.append(gate.admit()))
        before = REFUSED.counts[("waited",)]
        await _next_turns()
        assert verdicts == [True, False, False]
        assert REFUSED.counts[("waited",)] - before == 2
        assert gate.admit()  # a new turn: the next request goes on
    finally:
        gate.stop()


async def _behind() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.start()
    try:
        await _next_turns()
        loop = asyncio.get_running_loop()
        turns_left = [12]  # 12 turns of 8 ms: longer than the interval
        seen: list[bool] = []

        def long_turn() -> None:
            seen.append(gate.behind)
            _busy(0.008)
            turns_left[0] -= 1
            if turns_left[0]:
                loop.call_soon(long_turn)

        loop.call_soon(long_turn)
        while turns_left[0]:
            await asyncio.sleep(0)
        assert gate.behind and not gate.admit()
        assert seen[0] is False and seen[-1] is True
        await _next_turns()
        assert not gate.behind and gate.admit()
    finally:
        gate.stop()


def test_one_long_turn_is_not_a_standing_queue() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.observe_turn(0.2, 100.0)  # one GC pause, say
    gate.observe_turn(0.001, 100.001)
    assert not gate.behind
    for n in range(1, 5):  # 4 overrunning turns of 10 ms: 40 ms ≥ the 30 ms interval
        gate.observe_turn(0.010, 100.001 + n * 0.010)
    assert gate.behind


def test_a_zero_target_turns_admission_off() -> None:
    async def main() -> bool:
        gate = Admission(0.0, INTERVAL_S)
        gate.start()
        _busy(0.02)
        return gate.admit()

    assert uvloop.run(main())


# --- through a real gateway ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    env = {
        "FLASHSALE_IP_RATE_PER_S": str(LIFTED_IP_LIMITS["ip_rate_per_s"]),
        "FLASHSALE_IP_BURST": str(LIFTED_IP_LIMITS["ip_burst"]),
        "FLASHSALE_ADMISSION_TARGET_MS": "1",
    }
    with running_gateway(live_stack, ADMISSION_PORT, **env) as base:
        yield base


async def _burst(path: str, count: int) -> list[tuple[int, bytes, bytes]]:
    """``count`` purchases with a bad token, one per connection, all written at once: the
    gateway finds them queued together. (status, headers, body) of each answer."""
    opened = [asyncio.open_connection("127.0.0.1", ADMISSION_PORT) for _ in range(count)]
    streams = await asyncio.gather(*opened)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bad\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    for _, writer in streams:
        writer.write(request)

    async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))  # type: ignore[union-attr]
        return int(head[9:12]), head.lower(), await reader.readexactly(length)

    try:
        return list(await asyncio.gather(*(answer(r) for r, _ in streams)))
    finally:
        for _, writer in streams:
            writer.close()


def _metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.integration
async def test_a_burst_past_the_target_is_refused_before_the_token_check(gateway: str) -> None:
    item_id = new_sale(gateway, 10, 1)["items"][0]["itemId"]
    path = f"/api/flash-sales/items/{item_id}/purchase"
    unauthorized = 'flashsale_purchase_requests_total{outcome="unauthorized"}'
    before = _metric(gateway, re.escape(unauthorized)), _metric(gateway, REFUSED.name)
    answers = await _burst(path, 1000)
    statuses = [status for status, _, _ in answers]
    refused = [a for a in answers if a[0] == 503]
    assert set(statuses) <= {401, 503} and refused and 401 in statuses, statuses
    for _, head, body in refused:
        assert body == b'{"error":"OVERLOADED"}' and b"retry-after: 1\r\n" in head
    after = _metric(gateway, re.escape(unauthorized)), _metric(gateway, REFUSED.name)
    # Every 503 was decided before the token was looked at; every 401 after.
    assert after[0] - before[0] == statuses.count(401)
    assert after[1] - before[1] == len(refused)
    # The loop keeps up again at once: the next request is served.
    assert httpx.post(gateway + path, timeout=10).status_code == 401
