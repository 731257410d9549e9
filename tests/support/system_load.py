"""The steady open-loop purchase load of the whole-system fault tests (tests/support/system.py).

Buyer ``i`` (each a new buyer, so no per-buyer limit applies) presses Buy at ``start + i / rate``
whatever the gateways are doing: a stall shows as late answers and a gap in the 202s, not as a
slower load. Each answer records its gateway, status, Retry-After, latency from its due time and
the orderId of a 202. The load runs on an event loop in a thread of its own, so a test may block
(kill, pause, restart a server) while it runs.

Buyers are spread over the gateways round robin, like a balancer.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import aiohttp

from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session
from rig.pressure import CpuPressure

CONNECTIONS = 1000  # more than the requests in flight at once at any rate the tests use
LATE_MARGIN_S = 5.0  # a request is cut this long past its deadline: lateness stays measurable
# Closed under the request by the server as it went out (a stale keep-alive): sent again.
RESENDABLE = frozenset({"ServerDisconnectedError"})


@dataclass(frozen=True, slots=True)
class Answer:
    buyer: int  # the buyer's user id
    gateway: int  # index into the load's gateways
    due_s: float  # when it was due, in seconds since the load started
    done_s: float
    status: int  # 0: no answer (connection failed, reset, or cut past the deadline)
    retry_after: str | None
    order_id: str | None
    error: str  # the body's error code, or the exception of a status 0
    resent: bool = False  # sent again after the connection closed under it (see OpenLoad._one)

    @property
    def latency_s(self) -> float:
        return self.done_s - self.due_s

    @property
    def label(self) -> str:
        """The status, a 503 with its code: "202", "503 OVERLOADED", "503 UNAVAILABLE"."""
        return f"503 {self.error}" if self.status == 503 else str(self.status)


def purchase_path(item_id: int) -> str:
    return f"/api/flash-sales/items/{item_id}/purchase"


async def buy(
    session: aiohttp.ClientSession, base: str, item_id: int, token: str
) -> tuple[int, str | None, str | None, str]:
    """One purchase: (status, Retry-After, orderId, error code or exception name)."""
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.post(base + purchase_path(item_id), headers=headers) as response:
            body = await response.json(content_type=None)
            retry_after = response.headers.get("Retry-After")
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return 0, None, None, type(exc).__name__
    body = body if isinstance(body, dict) else {}
    return status, retry_after, body.get("orderId"), str(body.get("error", ""))


class OpenLoad:
    def __init__(
        self,
        cfg: Settings,
        gateways: Sequence[str],
        item_id: int,
        *,
        first_buyer: int,
        rate: float,
        duration_s: float,
        deadline_s: float,
    ) -> None:
        count = int(rate * duration_s)
        self.buyers = range(first_buyer, first_buyer + count)
        # Signed before the clock starts: the load's own CPU stays off the measured path.
        self._tokens = [sign_token(cfg, user) for user in self.buyers]
        self._gateways = list(gateways)
        self._item_id = item_id
        self._rate = rate
        self._timeout = aiohttp.ClientTimeout(total=deadline_s + LATE_MARGIN_S)
        self._start = 0.0
        self._end_s = duration_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._done: Future[list[Answer]] | None = None
        self._cpu: CpuPressure | None = None
        self._cpu_share: float | None = None  # over the whole load, once it is over
        # Buyer i's answer once it came: read live by settle(), written on the load's loop.
        self._answered: list[Answer | None] = [None] * count

    def now(self) -> float:
        """The load's clock: seconds since it started (for marking a fault's moments)."""
        return time.monotonic() - self._start

    def sleep_until(self, at_s: float) -> None:
        """Block the caller until the load's clock reads ``at_s``."""
        if (wait := at_s - self.now()) > 0:
            time.sleep(wait)

    def finish_at(self, at_s: float) -> None:
        """Send nothing due at or after ``at_s`` (the load's clock): end it early."""
        self._end_s = min(self._end_s, at_s)

    def settle(
        self,
        after_s: float,
        *,
        window_s: float,
        limit_s: float,
        ok: Callable[[Answer], bool] = lambda a: a.status == 202,
    ) -> float | None:
        """Block until every buyer due in some ``window_s`` after ``after_s`` got an ``ok``
        answer, then end the load there: a row that waits for recovery runs as long as recovery
        takes, not as long as its bound. The load's clock at the window's end, or None if no
        such window was complete, answers included, by ``after_s + limit_s + window_s`` (the
        load then runs on to its duration)."""
        run = max(1, round(window_s * self._rate))
        first = math.ceil(after_s * self._rate)
        while self.now() < after_s + limit_s + window_s:
            streak = 0
            for i in range(first, len(self._answered)):
                answer = self._answered[i]
                if answer is None and i / self._rate > self.now():
                    break  # not due yet: nothing later is answered either
                streak = streak + 1 if answer is not None and ok(answer) else 0
                if streak == run:
                    end_s = (i + 1) / self._rate
                    self.finish_at(end_s)
                    return end_s
            time.sleep(0.25)
        return None

    def pressure(self) -> float | None:
        """rig.pressure's CPU share over the load (so far, if it still runs)."""
        if self._cpu_share is not None or self._cpu is None:
            return self._cpu_share
        return self._cpu.share()

    def start(self) -> OpenLoad:
        self._cpu = CpuPressure()
        self._thread.start()
        self._start = time.monotonic()
        self._done = asyncio.run_coroutine_threadsafe(self._run(), self._loop)
        return self

    def result(self) -> list[Answer]:
        """Every answer, once the last request is answered or cut."""
        assert self._done is not None, "start() first"
        try:
            return self._done.result()
        finally:
            self._cpu_share = self.pressure()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _run(self) -> list[Answer]:
        async with client_session(limit=CONNECTIONS, timeout=self._timeout) as session:
            pending = []
            for i, (buyer, token) in enumerate(zip(self.buyers, self._tokens, strict=True)):
                due = i / self._rate
                if (wait := due - self.now()) > 0:
                    await asyncio.sleep(wait)
                if due >= self._end_s:
                    break
                pending.append(asyncio.create_task(self._one(session, buyer, due, token, i)))
            return list(await asyncio.gather(*pending))

    def _gateway_for(self, i: int) -> int:
        """Which gateway buyer ``i`` is sent to: round robin."""
        return i % len(self._gateways)

    async def _one(
        self, session: aiohttp.ClientSession, buyer: int, due: float, token: str, i: int
    ) -> Answer:
        gateway = self._gateway_for(i)
        base = self._gateways[gateway]
        status, retry_after, order_id, error = await buy(session, base, self._item_id, token)
        resent = False
        cut_s = due + self._timeout.total if self._timeout.total else due
        while error in RESENDABLE and self.now() < cut_s:
            # A keep-alive race: the connection closed (idle past the gateway's 2 s while this
            # starved client lagged its own drop, rig.http.keepalive_s) as the request went out.
            # A client sends a purchase again, as a balancer's retry-on would: it is idempotent
            # per buyer, so the checker still sees any second unit. Again until its cut: the
            # pool may hand out another connection the gateway closed meanwhile. Counted in the
            # row's line; latency from due.
            resent = True
            status, retry_after, order_id, error = await buy(session, base, self._item_id, token)
        answer = Answer(
            buyer, gateway, due, self.now(), status, retry_after, order_id, error, resent
        )
        self._answered[i] = answer
        return answer
