"""A waiting-room buyer over HTTP (aiohttp), as a well-behaved client does it: join (with the
sale's proof of work when asked), poll honouring Retry-After, buy once admitted. The demo's
``--waiting-room`` crowd and tests/gateway/test_waiting_room.py use it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from flashsale import http_retry
from gateway.auth import sign_token
from gateway.waiting_room import proof
from kernel.settings import Settings

Answer = tuple[int, Any, int]  # status, JSON body, Retry-After (0: none)


@dataclass
class Outcome:
    place: int | None = None
    admitted: bool = False
    bought: int | None = None  # the purchase's status
    last: int | None = None  # the last status seen


class RoomClient:
    def __init__(self, session: aiohttp.ClientSession, cfg: Settings, sale: int, item: int):
        self.session, self.cfg, self.sale, self.item = session, cfg, sale, item
        self.queue = f"/api/flash-sales/sales/{sale}/queue"
        self._tokens: dict[int, str] = {}

    def auth(self, buyer: int) -> dict[str, str]:
        """The buyer's one token, as a real client keeps it: a gateway verifies it once and
        remembers it, so a poll every Retry-After costs no signature check."""
        token = self._tokens.get(buyer)
        if token is None:
            token = self._tokens[buyer] = sign_token(self.cfg, buyer)
        return {"Authorization": f"Bearer {token}"}

    async def join(self, buyer: int, nonce: str | None = None) -> tuple[int, Any]:
        headers = self.auth(buyer)
        if nonce is not None:
            headers[proof.HEADER] = nonce
        status, body, _ = await self.send("POST", self.queue, headers)
        if status == 403 and body.get("error") == "PROOF_OF_WORK_REQUIRED" and nonce is None:
            solved = await asyncio.to_thread(proof.solve, self.sale, buyer, body["difficulty"])
            return await self.join(buyer, solved)
        return status, body

    async def poll(self, buyer: int, ticket: str) -> Answer:
        """The buyer's ticket, with the buyer's token: a gateway refuses anyone else's."""
        return await self.send("GET", self.queue, {**self.auth(buyer), "X-Queue-Ticket": ticket})

    async def buy(self, buyer: int, admission: str | None) -> tuple[int, Any]:
        headers = self.auth(buyer)
        if admission is not None:
            headers["X-Admission"] = admission
        path = f"/api/flash-sales/items/{self.item}/purchase"
        status, body, _ = await self.send("POST", path, headers)
        return status, body

    async def send(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        """One request, sent again as a client would: after a 503's Retry-After, or after a
        lost connection (flashsale/http_retry.py: every request here is idempotent)."""
        for _ in range(20):
            status, body, retry = await http_retry.answer(self.session, method, path, headers)
            answer = status, msgspec.json.decode(body), int(retry or "0")
            if answer[0] != 503:
                return answer
            await asyncio.sleep(answer[2])
        raise RuntimeError(f"{method} {path}: no answer but 503")

    async def wait_and_buy(
        self, buyer: int, ticket: str, held_at: list[float], timeout_s: float = 120
    ) -> Outcome:
        """Poll honouring Retry-After until admitted (then buy) or sold out; a 202's
        monotonic time goes into ``held_at``."""
        out = Outcome()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, body, retry = await self.poll(buyer, ticket)
            out.last = status
            if status == 410:
                return out
            if status == 429:
                await asyncio.sleep(retry)
                continue
            if status != 200:
                raise RuntimeError(f"poll answered {status}: {body}")
            ticket = body["ticket"]
            out.place = body.get("place")
            if body["state"] == "ADMITTED":
                out.admitted = True
                out.bought, _ = await self.buy(buyer, body["admission"])
                if out.bought == 202:
                    held_at.append(time.monotonic())
                out.last = out.bought
                return out
            await asyncio.sleep(retry)
        raise RuntimeError(f"buyer {buyer}: neither admitted nor sold out in {timeout_s}s")
