"""Buyers of the fleet's tests: one purchase each, through the balancer or a host."""

from __future__ import annotations

import time

import aiohttp
import httpx

from gateway.auth import sign_token
from gateway.paths import purchase_path
from kernel.settings import Settings

# Fresh buyer ids per run: a buyer buys an item once.
users = iter(range(int(time.time() * 1000) % 10**9 * 1000, 10**15))


def buy(cfg: Settings, base: str, item_id: int, user: int) -> httpx.Response:
    headers = {"Authorization": f"Bearer {sign_token(cfg, user)}"}
    return httpx.post(f"{base}{purchase_path(item_id)}", headers=headers, timeout=10)


def buy_new(
    cfg: Settings, base: str, item_id: int, user: int, *, retry_503: bool = False
) -> httpx.Response:
    """A purchase of an item just armed: a host whose catalog cache still holds the item as
    it was before the arm answers 403 for up to item_cache_seconds. With ``retry_503`` the
    buyer also retries a 503 (could not confirm: a retry answers 202, or 409 with the order)."""
    deadline = time.monotonic() + cfg.item_cache_seconds + 5
    retried = {403, 503} if retry_503 else {403}
    while (answer := buy(cfg, base, item_id, user)).status_code in retried:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.05)
    return answer


async def buy_noting_refusals(
    session: aiohttp.ClientSession, cfg: Settings, item_id: int, user: int, refusals: list[bytes]
) -> int:
    """One purchase through ``session`` (the balancer's): its status; a 429's body is appended
    to ``refusals`` after checking its Retry-After."""
    headers = {"Authorization": f"Bearer {sign_token(cfg, user)}"}
    async with session.post(purchase_path(item_id), headers=headers) as response:
        body = await response.read()
        if response.status == 429:
            assert int(response.headers["retry-after"]) >= 1
            refusals.append(body)
        return response.status
