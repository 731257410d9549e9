"""A steady open-loop purchase load for the fault tests: buyer ``i`` (each a new buyer, so no
per-buyer limit applies) presses Buy at ``start + i / rate`` whatever the gateway is doing, so a
stall shows as a gap in the 202s and a pile of late answers, not as a slower load."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp

from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session

REQUEST_TIMEOUT_S = 15.0  # far past every deadline of the gateway: a hang shows as status 0


@dataclass(frozen=True, slots=True)
class Answer:
    sent_s: float  # when it was due, in seconds since the load started
    done_s: float
    status: int  # 0: no answer (connection error or our timeout)
    order_id: str | None
    error: str | None  # the body's error code, or why there was no answer


@dataclass(frozen=True, slots=True)
class LoadResult:
    answers: list[Answer]

    @property
    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.answers)

    @property
    def errors(self) -> Counter[str]:
        return Counter(f"{a.status} {a.error}" for a in self.answers if a.status != 202)

    @property
    def accepted(self) -> set[str]:
        return {a.order_id for a in self.answers if a.status == 202 and a.order_id}

    def between(self, start_s: float, end_s: float) -> list[Answer]:
        """The answers to requests due in [start_s, end_s)."""
        return [a for a in self.answers if start_s <= a.sent_s < end_s]

    def pause_s(self, after_s: float = 0.0) -> float:
        """The longest time without a 202 answer, from ``after_s`` on (a fault's start)."""
        done = sorted(a.done_s for a in self.answers if a.status == 202 and a.done_s >= after_s)
        marks = [after_s, *done]
        return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)

    def first_202_after(self, at_s: float) -> float:
        """How long after ``at_s`` the first 202 answer came (infinite if none did)."""
        done = [a.done_s for a in self.answers if a.status == 202 and a.done_s >= at_s]
        return min(done, default=float("inf")) - at_s

    @property
    def held(self) -> int:
        """503s naming an orderId: the outcome was unknown, so the unit stayed held."""
        return sum(1 for a in self.answers if a.status == 503 and a.order_id)

    def slowest_s(self, status: int) -> float:
        return max((a.done_s - a.sent_s for a in self.answers if a.status == status), default=0.0)


class PurchaseLoad:
    """``async with PurchaseLoad(...) as load:`` runs the load in the background; ``load.now()``
    is the load's clock (for marking when a fault was injected); ``await load.result()``."""

    def __init__(
        self,
        cfg: Settings,
        base: str,
        item_id: int,
        users: Iterator[int],
        *,
        rate: float,
        duration_s: float,
    ) -> None:
        count = int(rate * duration_s)
        # Signed before the clock starts: the load's own CPU stays off the measured path.
        self._tokens = [f"Bearer {sign_token(cfg, next(users))}" for _ in range(count)]
        self._url = f"{base}/api/flash-sales/items/{item_id}/purchase"
        self._rate = rate
        self._start = 0.0
        self._task: asyncio.Task[list[Answer]] | None = None

    def now(self) -> float:
        return time.monotonic() - self._start

    async def __aenter__(self) -> PurchaseLoad:
        self._start = time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is not None and self._task is not None:
            self._task.cancel()

    async def result(self) -> LoadResult:
        assert self._task is not None
        return LoadResult(await self._task)

    async def _run(self) -> list[Answer]:
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with client_session(limit=2000, timeout=timeout) as session:
            pending = []
            for i, token in enumerate(self._tokens):
                due = i / self._rate
                if (wait := due - self.now()) > 0:
                    await asyncio.sleep(wait)
                pending.append(asyncio.create_task(self._buy(session, due, token)))
            return list(await asyncio.gather(*pending))

    async def _buy(self, session: aiohttp.ClientSession, due: float, token: str) -> Answer:
        try:
            async with session.post(self._url, headers={"Authorization": token}) as response:
                body = await response.json()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Answer(due, self.now(), 0, None, type(exc).__name__)
        return Answer(due, self.now(), status, body.get("orderId"), body.get("error"))
