"""The ``loadgen`` section: how many requests/s one load-generator process makes on one core,
measured against nginx ``return 410`` (server core) so the server is never the limit. It tells
the planner how many Locust workers a target rate needs.

- ``locust``: one headless Locust process (``locust_probe.py``: FastHttpUser, no wait, 64 users),
  the shape of one worker of a distributed run; rate = requests / run time.
- ``openloop``: ``loadtest.generators.openloop`` offered far more than it can send; its ceiling
  is what it answered over the time it took, drain included.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from kernel.settings import PROJECT_ROOT
from loadtest.bench import servers
from loadtest.bench.context import Context
from loadtest.bench.results import Recorder, Step, rotate
from loadtest.constants import BENCH_PORTS, LOCUST_PROBE
from loadtest.generators.openloop import measure as measure_openloop
from rig.ports import free_port

LOCUST_USERS = 64
OPENLOOP_OFFERED = 30_000.0
OPENLOOP_CONNECTIONS = 256
TOOLS = ("locust", "openloop")


def locust(url: str, duration_s: float, core: int, workdir: Path) -> dict[str, Any]:
    prefix = workdir / "locust-probe"
    argv = [
        str(Path(sys.executable).with_name("locust")), "-f", str(LOCUST_PROBE), "--headless",
        "-u", str(LOCUST_USERS), "-r", str(LOCUST_USERS), "-t", f"{max(1, round(duration_s))}s",
        "--host", url, "--csv", str(prefix), "--only-summary", "--skip-log",
    ]  # fmt: skip
    done = subprocess.run(
        servers.pinned(core, argv),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=duration_s + 120,
        check=False,
    )
    stats = Path(f"{prefix}_stats.csv")
    if not stats.exists():
        raise RuntimeError(f"locust wrote no stats (exit {done.returncode}): {done.stderr[-500:]}")
    with stats.open() as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    total = rows["Aggregated"]
    return {
        "rps": float(total["Requests/s"]),
        "requests": int(total["Request Count"]),
        "failures": int(total["Failure Count"]),
        "p50_ms": float(total["50%"]),
        "p99_ms": float(total["99%"]),
        "users": LOCUST_USERS,
    }


def openloop(url: str, duration_s: float, core: int) -> dict[str, Any]:
    summary = measure_openloop(
        url,
        rate=OPENLOOP_OFFERED,
        duration_s=duration_s,
        warmup_s=1,
        connections=OPENLOOP_CONNECTIONS,
        core=core,
        drain_s=120,
        timeout_s=duration_s + 300,
    )
    return {
        "rps": summary["answered_total"] / summary["elapsed_s"],
        "offered_rps": OPENLOOP_OFFERED,
        "requests": summary["answered_total"],
        "unanswered": summary["unanswered"],
    }


def summary(m: dict[str, Any]) -> str:
    return f"{m['rps']:,.0f} req/s from one process"


def measure(ctx: Context, _: None, rec: Recorder) -> dict[str, Any]:
    o, repeats, duration_s, workdir = ctx.opts, ctx.args.repeats, ctx.opts.duration_s, ctx.workdir
    server_core, load_core = o.server_core, o.load_core
    nginx_port = free_port(set(), BENCH_PORTS)
    url = f"http://127.0.0.1:{nginx_port}"
    argv = servers.nginx_argv(nginx_port, workdir / "nginx-loadgen")
    ready = servers.http_ready(f"{url}/", 410)

    def ceiling(tool: str) -> tuple[dict[str, Any], list[str]]:
        if tool == "locust":
            m = locust(url, duration_s, load_core, workdir)
            return m, [f"{m['failures']} failures"] if m["failures"] else []
        return openloop(url, duration_s, load_core), []

    def steps(r: int) -> Iterator[Step]:
        for tool in rotate(TOOLS, r):
            yield f"{tool:<8} against nginx", ("ceiling", tool, r), partial(ceiling, tool)

    with servers.running("nginx-loadgen", argv, ready, ctx.log_dir, server_core):
        rec.repeats("loadgen", repeats, steps, summary)
    return {
        "duration_s": duration_s,
        "locust_users": LOCUST_USERS,
        "openloop_offered": OPENLOOP_OFFERED,
        "openloop_connections": OPENLOOP_CONNECTIONS,
        "server_core": server_core,
        "load_core": load_core,
        "locust_command": f"taskset -c {load_core} .venv/bin/locust"
        f" -f {LOCUST_PROBE.relative_to(PROJECT_ROOT)}"
        f" --headless -u {LOCUST_USERS} -r {LOCUST_USERS} -t {max(1, round(duration_s))}s"
        " --host <nginx return 410>",
        "repeats": repeats,
    }
