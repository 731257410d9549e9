"""Servers under test, each started pinned to one core (``taskset -c``) in its own session and
stopped, with everything it forked, when the ``with`` block ends, also on Ctrl-C or an error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from flashsale.stack.processes import http_ready, process_group, wait_ready
from loadtest.constants import BASELINES_DIR, NGINX_LISTEN
from loadtest.measure.child import pinned

__all__ = ["http_ready", "pinned", "running"]

READY_TIMEOUT_S = 60.0


@contextmanager
def running(
    name: str,
    argv: list[str],
    ready: Callable[[], bool],
    log_dir: Path,
    core: int | str = 0,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` pinned to ``core``, wait until ``ready()``, yield, then stop its group."""
    log = log_dir / f"{name}.log"
    with process_group(pinned(core, argv), log=log, env=env) as proc:
        wait_ready(proc, ready, READY_TIMEOUT_S, name, log)
        yield proc


def gateway_argv(port: int, workers: int = 1) -> list[str]:
    return [sys.executable, "-m", "gateway", "--workers", str(workers), "--port", str(port)]


def granian_argv(target: str, port: int) -> list[str]:
    granian = str(Path(sys.executable).with_name("granian"))
    return [
        granian, "--interface", "asgi", "--loop", "uvloop", "--workers", "1",
        "--host", "127.0.0.1", "--port", str(port), "--backlog", "4096", "--no-access-log", target,
    ]  # fmt: skip


def nginx_argv(port: int, prefix: Path) -> list[str]:
    """nginx with our config, its listen port rewritten, every file under ``prefix``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = (BASELINES_DIR / "nginx.conf").read_text().replace(NGINX_LISTEN, f"127.0.0.1:{port}")
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    conf_path = prefix / "nginx.conf"
    conf_path.write_text(conf)
    return [nginx, "-e", "stderr", "-p", str(prefix), "-c", str(conf_path)]


def redis_argv(port: int, workdir: Path) -> list[str]:
    """A throw-away Redis (no persistence) for measuring one Redis core on its own."""
    return [
        shutil.which("redis-server") or "/usr/bin/redis-server", "--bind", "127.0.0.1",
        "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir),
    ]  # fmt: skip
