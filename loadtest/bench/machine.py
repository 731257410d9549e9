"""What the numbers were measured on: cores, CPU model, kernel, memory, load, tool versions."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib.metadata import version
from typing import Any

from kernel.settings import PROJECT_ROOT


def _first(pattern: str, text: str, default: str = "unknown") -> str:
    found = re.search(pattern, text, flags=re.MULTILINE)
    return found.group(1).strip() if found else default


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, check=False, cwd=PROJECT_ROOT
        )
    except OSError:
        return ""
    return done.stdout + done.stderr


def git_commit() -> dict[str, Any]:
    """The code that was measured: ``git rev-parse --short HEAD``, whether the tree was clean,
    and if not, how many files differed."""
    head = _run(["git", "rev-parse", "--short", "HEAD"]).strip() or "unknown"
    # The harness's own outputs (this page and the section files) are not the measured code:
    # a run that has written an earlier section must not call the next one dirty.
    status = _run(
        ["git", "status", "--porcelain", "--", ".", ":!bench.md", ":!loadtest/reports"]
    ).splitlines()
    modified = sum(1 for line in status if line and not line.startswith("??"))
    untracked = sum(1 for line in status if line.startswith("??"))
    changes = f"{modified} modified, {untracked} untracked files"
    return {"commit": head, "clean": not (modified or untracked), "changes": changes}


def loadavg() -> float:
    return os.getloadavg()[0]


def describe() -> dict[str, Any]:
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    with open("/proc/meminfo") as f:
        mem_kib = int(_first(r"^MemTotal:\s+(\d+)", f.read(), "0"))
    return {
        "nproc": int(_run(["nproc"]).strip() or 0),
        "cpu_model": _first(r"^model name\s*:\s*(.+)$", cpuinfo),
        "kernel": platform.release(),
        "memory_gib": mem_kib / 2**20,
        "loadavg_start": loadavg(),
    }


def versions() -> dict[str, str]:
    return {
        "Python": platform.python_version(),
        "granian": version("granian"),
        "uvloop": version("uvloop"),
        "redis-py": version("redis"),
        "confluent-kafka": version("confluent-kafka"),
        "PyJWT": version("pyjwt"),
        "hdrhistogram": version("hdrhistogram"),
        "wrk": _first(r"^wrk (\S+)", _run(["wrk", "-v"])),
        "nginx": _first(r"nginx/(\S+)", _run(["nginx", "-v"])),
        "redis-server": _first(r"v=(\S+)", _run(["redis-server", "--version"])),
        "redis-benchmark": _first(r"redis-benchmark (\S+)", _run(["redis-benchmark", "--version"])),
        "haproxy": _first(r"HAProxy version (\S+)", _run(["haproxy", "-v"])),
    }
