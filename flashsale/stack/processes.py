"""Start and stop the stack's server processes by PID file.

Each server runs in its own session (so a Ctrl-C in the terminal does not reach it) with its
output in ``<state>/logs/<name>.log``. ``stop`` only ever signals a PID this module recorded,
and only while that PID still runs the program it started (guarding against PID reuse).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Servers outlive the Popen objects that started them; keeping the objects here stops Python
# from warning that a child "is still running" when one is garbage collected.
_started: list[subprocess.Popen[bytes]] = []


class StackError(RuntimeError):
    """A stack component could not be started, checked or stopped."""


@dataclass(frozen=True, slots=True)
class Managed:
    name: str
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pids" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded PID if that process is still alive and still ours."""
        try:
            pid_text, _, marker = self.pid_file.read_text().partition("\n")
            pid = int(pid_text)
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return None
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return None
        return pid if marker.strip() in cmdline else None

    def start(
        self,
        argv: Sequence[str],
        *,
        marker: str,
        user: str | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - argv is built by the stack, not user input
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=user,
                cwd=cwd,
                env=env,
            )
        _started.append(proc)
        self.pid_file.write_text(f"{proc.pid}\n{marker}\n")
        return proc.pid

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> bool:
        """Signal the process, wait for it to exit, SIGKILL it past the timeout."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, sig)
        if not wait_until(lambda: self.pid() is None, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: self.pid() is None, 5.0)
        self.pid_file.unlink(missing_ok=True)
        return True


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``check`` until it is true or the timeout passes; never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready = check()
        except Exception:  # noqa: BLE001 - a probe that raises means "not yet"
            ready = False
        if ready:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def run(
    argv: Sequence[str], *, user: str | None = None, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(  # noqa: S603
        list(argv),
        capture_output=True,
        text=True,
        user=user,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise StackError(
            f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False
