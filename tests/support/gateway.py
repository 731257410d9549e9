"""The tests' gateway: ``rig.sale``'s, with the tests' defaults (a patient Redis deadline, a
short drain), and a one-item sale made with the tests' admin token."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flashsale.stack.processes import settings_env
from kernel.settings import Settings, settings
from rig import sale
from tests.support.constants import DRAIN_MS, REDIS_TIMEOUT_MS

ADMIN = {"Authorization": f"Bearer {settings().admin_token}"}
SERVICE = {"Authorization": f"Bearer {settings().service_token}"}


@contextmanager
def running_gateway(
    cfg: Settings,
    port: int,
    *,
    log: Path | str | None = None,
    core: int | str | None = None,
    **env: str,
) -> Iterator[str]:
    """A gateway on ``port`` for the block; ``env`` (``FLASHSALE_*`` names, see
    ``settings_env``, so never ``log``) on top of the tests' defaults; its output appended to
    the file ``log`` if given. Yields its base URL."""
    defaults = settings_env(redis_timeout_ms=REDIS_TIMEOUT_MS, gateway_drain_delay_ms=DRAIN_MS)
    out = None if log is None else Path(log)
    with sale.running_gateway(cfg, port, env={**defaults, **env}, log=out, core=core) as base:
        yield base


def new_sale(
    base: str, quantity: int, shards: int, window_s: int = 600, opens_in_s: int = -5
) -> dict[str, Any]:
    return sale.one_item_sale(
        base, settings(), quantity, shards, window_s=window_s, opens_in_s=opens_in_s
    )
