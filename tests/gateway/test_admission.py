"""Admission: a request that waited past the budget, or arrives while a queue stands (every
reservation of an interval slower than the target), is refused 503 OVERLOADED before any work;
long loop turns and a burst that drains within an interval are not a standing queue. First on a
real uvloop loop and the controller itself, then through a real gateway; bursts and overload
against the real stack are in tests/system/test_bursts.py."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest
import uvloop

from flashsale.stack.processes import settings_env
from gateway.admission import IDLE_TICK_S, RATE_SLOTS, REFUSED, SOJOURNS, TICK_S, TURNS, Admission
from kernel.settings import Settings
from rig.sale import LIFTED_IP_LIMITS
from rig.waiting import until
from tests.support.gateway import new_sale, running_gateway
from tests.support.workers import worker_port

ADMISSION_PORT = worker_port(18093)
TARGET_S, INTERVAL_S, BUDGET_S = 0.05, 0.03, 0.005


def _busy(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


async def _next_turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(TICK_S * 2)


def test_a_request_that_waited_past_the_budget_is_refused() -> None:
    uvloop.run(_waited())  # the gateway's loop: its turn order is what admission relies on


async def _waited() -> None:
    gate = Admission(TARGET_S, INTERVAL_S, BUDGET_S)
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


async def _until_idle(gate: Admission, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not gate.idle:
        assert time.monotonic() < deadline, "the gate never went idle"
        await asyncio.sleep(TICK_S)


def test_an_idle_gate_ticks_slowly_and_the_next_request_brings_the_1_ms_tick_back() -> None:
    async def main() -> tuple[int, int, bool]:
        gate = Admission(TARGET_S, INTERVAL_S, idle_after_s=0.02)
        gate.start()
        try:
            await _until_idle(gate)
            before = sum(TURNS.counts)
            await asyncio.sleep(2 * IDLE_TICK_S)  # ~200 turns at the 1 ms tick
            idle_turns = sum(TURNS.counts) - before
            assert gate.admit()  # the first request wakes it
            woken = gate.idle
            before = sum(TURNS.counts)
            # Slow ticks are not counted as turns (above), so any turn counted now is a 1 ms
            # tick's: polled with a deadline, not a fixed window a busy machine may not give.
            await until(lambda: sum(TURNS.counts) - before >= 3, 5, "three 1 ms turns", TICK_S)
            busy_turns = sum(TURNS.counts) - before
            gate.answered()
            await _until_idle(gate)  # nothing in flight, nothing answered: idle again
            return idle_turns, busy_turns, woken
        finally:
            gate.stop()

    idle_turns, busy_turns, woken = uvloop.run(main())
    assert idle_turns == 0  # the slow tick's intervals are not turns
    assert busy_turns >= 3
    assert not woken


def test_a_request_behind_a_stall_of_an_idle_process_is_still_judged_by_its_wait() -> None:
    async def main() -> tuple[bool, bool, bool]:
        gate = Admission(TARGET_S, INTERVAL_S, BUDGET_S, idle_after_s=0.02)
        gate.start()
        try:
            await _until_idle(gate)
            _busy(BUDGET_S + 2 * IDLE_TICK_S)  # past the budget and the slow tick's slack
            stalled = gate.admit()
            still_idle = gate.idle  # a refused request wakes nothing
            await asyncio.sleep(2 * TICK_S)  # a new turn: its first request goes on
            return stalled, still_idle, gate.admit()
        finally:
            gate.stop()

    assert uvloop.run(main()) == (False, True, True)


def test_an_idle_gate_does_not_take_the_slow_ticks_interval_for_a_wait() -> None:
    async def main() -> bool:
        # A budget shorter than the slow tick: half a slow period after one, a request that
        # arrived just now has not waited.
        gate = Admission(TARGET_S, INTERVAL_S, IDLE_TICK_S / 5, idle_after_s=0.02)
        gate.start()
        try:
            await _until_idle(gate)
            await asyncio.sleep(IDLE_TICK_S * 1.5)  # between two slow ticks
            return gate.admit()
        finally:
            gate.stop()

    assert uvloop.run(main())


def test_long_loop_turns_alone_are_not_a_standing_queue() -> None:
    async def main() -> tuple[bool, bool]:
        gate = Admission(0.005, INTERVAL_S)  # the default budget: 8 ms turns are far within it
        gate.start()
        try:
            for _ in range(12):  # 12 turns of 8 ms: longer than the interval, nothing finished
                _busy(0.008)
                await asyncio.sleep(0)
            return gate.behind, gate.admit()
        finally:
            gate.stop()

    assert uvloop.run(main()) == (False, True)


def test_reservations_slower_than_the_target_for_an_interval_are_a_standing_queue() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    before = REFUSED.counts[("behind",)]
    gate.observe_sojourns(5, 0, 100.0)
    gate.observe_sojourns(5, 0, 100.02)  # slow for 20 ms: a burst draining, not yet a queue
    assert not gate.behind and gate.admit()
    gate.observe_sojourns(5, 0, 100.03)  # slow for the whole 30 ms interval
    assert gate.behind and not gate.admit()
    assert REFUSED.counts[("behind",)] - before == 1
    gate.observe_sojourns(3, 1, 100.04)  # one went through without queueing: none stands
    assert not gate.behind and gate.admit()


def test_one_fast_reservation_in_the_interval_means_no_standing_queue() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.observe_sojourns(5, 0, 100.0)
    gate.observe_sojourns(5, 1, 100.02)
    gate.observe_sojourns(5, 0, 100.04)  # slow again from here: the interval starts anew
    assert not gate.behind
    gate.observe_sojourns(5, 0, 100.08)
    assert gate.behind


def test_a_drained_queue_opens_the_gate_after_a_quiet_target() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.observe_sojourns(5, 0, 100.0)
    gate.observe_sojourns(5, 0, 100.04)
    assert gate.behind
    gate.observe_sojourns(0, 0, 100.04 + TARGET_S / 2)  # in flight still: keep refusing
    assert gate.behind
    gate.observe_sojourns(0, 0, 100.041 + TARGET_S)  # nothing finished for a target: drained
    assert not gate.behind and gate.admit()


def test_quiet_for_an_interval_forgets_the_slow_ones() -> None:
    gate = Admission(TARGET_S, INTERVAL_S)
    gate.observe_sojourns(5, 0, 100.0)
    gate.observe_sojourns(0, 0, 100.0 + INTERVAL_S)
    gate.observe_sojourns(5, 0, 100.0 + INTERVAL_S + 0.001)  # a new burst's first, not a queue
    assert not gate.behind


def test_past_the_in_flight_cap_a_request_is_refused_until_one_is_answered() -> None:
    gate = Admission(TARGET_S, INTERVAL_S, min_in_flight=3)
    before = REFUSED.counts[("in_flight",)]
    assert [gate.admit() for _ in range(4)] == [True, True, True, False]
    assert REFUSED.counts[("in_flight",)] - before == 1
    gate.answered()
    assert gate.admit() and not gate.admit()


def test_the_in_flight_cap_is_the_best_answer_rate_of_the_last_seconds_times_the_budget() -> None:
    gate = Admission(TARGET_S, INTERVAL_S, budget_s=0.5, min_in_flight=10)
    start = gate._slot_started  # noqa: SLF001 - the rate's clock, driven by hand here
    for _ in range(400):  # 400 answered in one second: 400/s, so 200 in half a second
        assert gate.admit()
        gate.answered()
    gate.close_rate_slot(start + 1.0)
    assert gate.limit == 200
    for second in range(2, 2 + RATE_SLOTS - 1):  # quiet seconds: the best one still counts
        gate.close_rate_slot(start + second)
        assert gate.limit == 200
    gate.close_rate_slot(start + 1 + RATE_SLOTS)  # the busy second has left the window
    assert gate.limit == 10  # the floor


def test_the_target_is_judged_at_the_sojourn_histograms_bound() -> None:
    assert 0.05 in SOJOURNS.bounds  # the default target is one of its bounds
    counts = SOJOURNS.counts
    gate = Admission(0.05, INTERVAL_S)
    done, within = gate._sojourn_counts()  # noqa: SLF001 - the controller's one input
    SOJOURNS.observe(0.05)
    SOJOURNS.observe(0.051)
    try:
        assert gate._sojourn_counts() == (done + 2, within + 1)  # noqa: SLF001
    finally:
        counts[:] = [0] * len(counts)  # this process serves nothing: no one else reads them


def test_a_zero_target_turns_admission_off() -> None:
    async def main() -> bool:
        gate = Admission(0.0, INTERVAL_S)
        gate.start()
        _busy(0.02)
        gate.observe_sojourns(5, 0, 100.0)
        gate.observe_sojourns(5, 0, 200.0)
        return gate.admit()

    assert uvloop.run(main())


# --- through a real gateway ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    # The burst's connections are all opened before any request is written; on a starved
    # machine the first ones then stay silent longer than the 2 s header timeout allows.
    patient = {"gateway_header_timeout_ms": 30_000}
    env = settings_env(**LIFTED_IP_LIMITS, admission_target_ms=1, **patient)
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
async def test_a_burst_is_not_a_standing_queue_even_with_a_1_ms_target(gateway: str) -> None:
    item_id = new_sale(gateway, 10, 1)["items"][0]["itemId"]
    path = f"/api/flash-sales/items/{item_id}/purchase"
    unauthorized = 'flashsale_purchase_requests_total{outcome="unauthorized"}'
    before = _metric(gateway, re.escape(unauthorized)), _metric(gateway, REFUSED.name)
    answers = await _burst(path, 1000)
    statuses = [status for status, _, _ in answers]
    # A thousand at once make the loop's turns long, but no reservation queues: all answered.
    assert statuses == [401] * 1000, sorted(set(statuses))
    after = _metric(gateway, re.escape(unauthorized)), _metric(gateway, REFUSED.name)
    assert after[0] - before[0] == 1000
    assert after[1] == before[1]
