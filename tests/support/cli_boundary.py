"""The command line with its boundary faked: ``flashsale.cli.main`` in this process, its
database pool and shard router replaced by the test's objects, so a handler's printing and its
refusals are checked in the fast tier. What the fakes answer is what the test says the stack
holds; the stack tests (tests/flashsale/test_cli*.py) check the real queries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from flashsale.cli import connect, item, reconcile, room, sale, voucher
from flashsale.cli.main import main as cli_main
from kernel.settings import Settings

# Each module that binds run_stack / run_db at import; the rest import them from connect.
_BOUND = (connect, item, reconcile, room, sale, voucher)


@dataclass(frozen=True)
class Ran:
    status: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines()]


def fake_stack(monkeypatch: pytest.MonkeyPatch, pool: Any = None, router: Any = None) -> None:
    """Every handler's ``run_stack`` / ``run_db`` runs its work on ``pool`` and ``router``."""

    def run_stack(cfg: Settings, work: Callable[[Any, Any], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.run(work(pool, router))

    def run_db(cfg: Settings, work: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.run(work(pool))

    for module in _BOUND:
        for name, fake in (("run_stack", run_stack), ("run_db", run_db)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    status = cli_main(list(args))
    captured = capsys.readouterr()
    return Ran(status, captured.out, captured.err)


class Forbidden:
    """A pool or router that must not be used: any attribute is a failure."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # probes (copy, pickle, repr helpers) are not uses
            raise AttributeError(name)
        raise AssertionError(f"the command used {name!r}, which it must not")
