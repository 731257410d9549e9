"""Start and stop processes: the stack's servers by PID file, and child process groups.

Each stack server runs in its own session (so a Ctrl-C in the terminal does not reach it) with
its output in ``<state>/logs/<name>.log``. ``Managed.stop`` only ever signals a PID this module
recorded, and only while that PID still runs the program it started (guarding against PID reuse).

``process_group`` runs a child (a gateway, a writer, a server under test) the same way, in a
session of its own, and stops its whole group when the block ends: the one place the demo, the
tests and the load tests start and stop their children.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from kernel.settings import PREFIX, PROJECT_ROOT, Settings
from kernel.waiting import wait_until as wait_until  # the stack's modules wait with it too

STOP_GRACE_S = 15.0  # SIGTERM to SIGKILL: a writer flushing its last batch needs a few seconds

# Servers outlive the Popen objects that started them; keeping the objects here stops Python
# from warning that a child "is still running" when one is garbage collected, and at exit
# each running one is marked as left to run (a server is the stack's, not this process's).
_started: list[subprocess.Popen[bytes]] = []


@atexit.register
def _leave_servers_running() -> None:
    for proc in _started:
        if proc.poll() is None:
            proc.returncode = 0  # not ours to wait for: Popen's exit-time warning is moot


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


def settings_env(**values: object) -> dict[str, str]:
    """The ``FLASHSALE_*`` variables that give a child process these ``Settings`` fields: the
    names are checked against ``Settings``, so a typo fails here, not silently in the child."""
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"not Settings fields: {', '.join(unknown)}")
    return {PREFIX + name.upper(): _env_value(value) for name, value in values.items()}


def _env_value(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(part) for part in value)
    return str(value)


# What this module starts (the demo's, the tests' and the load tests' gateways and writers) runs
# on the local stack, whose public development secrets a gateway accepts only there
# (gateway/auth.py). An environment that says otherwise wins.
_LOCAL_STACK = {PREFIX + "ENV": "local"}
# Every loopback crowd (the demo's, the tests', the load tests') comes from 127.0.0.1: the per-IP
# bucket is lifted for the gateways they start, or it would be what stops them.
LIFTED_IP_LIMITS = {
    "ip_rate_per_s": 100_000_000,
    "ip_burst": 100_000_000,
    "waiting_room_join_address_rate_per_s": 100_000_000,
    "waiting_room_join_address_burst": 100_000_000,
}


def spawn_group(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path = PROJECT_ROOT,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (so it leads a process group that ``stop_group``
    stops whole, and a Ctrl-C in the terminal does not reach it), with our environment plus
    ``env``; its output appended to ``log``, or discarded."""
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(log, "ab")) if log is not None else subprocess.DEVNULL
        return subprocess.Popen(  # noqa: S603 - argv is built by the caller, not user input
            list(argv),
            cwd=cwd,
            env={**_LOCAL_STACK, **os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group ``proc`` leads (it and everything it forked), wait up to
    ``grace_s`` for it to exit, then SIGKILL the group."""
    if proc.returncode is not None:
        return  # reaped already: its PID, and so the group's id, may belong to another process
    with contextlib.suppress(ProcessLookupError):  # the whole group has exited
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@contextmanager
def process_group(
    argv: Sequence[str],
    *,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path = PROJECT_ROOT,
    grace_s: float = STOP_GRACE_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """``spawn_group`` for the block, ``stop_group`` after it, also on an error or Ctrl-C."""
    proc = spawn_group(argv, log=log, env=env, cwd=cwd)
    try:
        yield proc
    finally:
        stop_group(proc, grace_s)


def wait_ready(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    timeout: float,
    name: str,
    log: Path | None = None,
) -> None:
    """Until ``ready()``; a child that exits first, or is not ready in time, is a StackError."""
    see = f"; see {log}" if log is not None else ""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise StackError(f"{name} exited with {proc.returncode}{see}")
        if time.monotonic() > deadline:
            raise StackError(f"{name} not ready after {timeout:.0f}s{see}")
        time.sleep(0.1)


# Readiness probes go straight to loopback: a proxy from the environment must not answer them.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_ready(url: str, status: int = 200) -> Callable[[], bool]:
    """A probe: does a GET of ``url`` answer ``status``?"""

    def ready() -> bool:
        try:
            with _direct.open(url, timeout=1) as response:
                return bool(response.status == status)
        except urllib.error.HTTPError as error:  # a 4xx or 5xx answer is still an answer
            error.close()
            return error.code == status
        except OSError:
            return False

    return ready
