"""A child process's result: it prints one line ``<PREFIX>{json}``; the parent runs it (pinned
to a core when asked) to its end, or until it says it is done and is interrupted, reads that
line, and says why when there is none."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.settings import PROJECT_ROOT
from loadtest.measure import cpu


def pinned(core: int | str, argv: list[str]) -> list[str]:
    """``argv`` run on ``core`` (a core number, or a ``taskset`` list such as ``"0,1"``)."""
    return ["taskset", "-c", str(core), *argv]


def result_line(lines: Iterable[str], prefix: str, what: str, why: str = "") -> Any:
    """The JSON of the last line in ``lines`` that starts with ``prefix``."""
    found = None
    for line in lines:
        if line.startswith(prefix):
            found = line[len(prefix) :]
    if found is None:
        raise RuntimeError(f"{what} printed no {prefix.strip()} line{': ' if why else ''}{why}")
    return json.loads(found)


@dataclass(frozen=True)
class Finished:
    result: Any  # the result line's JSON
    cpu_s: float  # the child's own CPU time, user + system
    returncode: int


def run(
    argv: list[str],
    prefix: str,
    *,
    what: str,
    timeout_s: float,
    core: int | str | None = None,
    cwd: Path = PROJECT_ROOT,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run ``argv`` to its end and read its result line (stderr is kept for the error)."""
    before = cpu.children_s()
    done = subprocess.run(  # noqa: S603 - our own argv
        argv if core is None else pinned(core, argv),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=None if env is None else dict(env),
    )
    used = cpu.children_s() - before
    why = f"exit {done.returncode}: {done.stderr[-2000:]}"
    result = result_line(done.stdout.splitlines(), prefix, what, why)
    return Finished(result, used, done.returncode)


def summary(argv: list[str], prefix: str, **how: Any) -> dict[str, Any]:
    """``run``'s result line, which must be a JSON object."""
    found = run(argv, prefix, **how).result
    if not isinstance(found, dict):
        raise RuntimeError(f"{how.get('what', argv[0])}: its {prefix.strip()} line is no object")
    return found


def run_until(
    argv: list[str], prefix: str, done: str, *, what: str, wait_s: float, core: int | str
) -> tuple[Finished, bool]:
    """Run ``argv`` until it prints a line starting with ``done`` (``wait_s`` at most), then
    interrupt it (SIGINT: it prints its result line and exits) and read that line; and whether
    ``done`` came in time."""
    before = cpu.children_s()
    lines: list[str] = []
    came = threading.Event()
    proc = subprocess.Popen(pinned(core, argv), stdout=subprocess.PIPE, text=True)  # noqa: S603

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(done):
                came.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    in_time = came.wait(wait_s)
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    reader.join(10)
    used = cpu.children_s() - before
    why = f"exit {proc.returncode}: {''.join(lines)[-500:]}"
    return Finished(result_line(lines, prefix, what, why), used, proc.returncode), in_time
