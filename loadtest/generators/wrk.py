"""Closed-loop load with wrk, pinned to the load-generator core; the Lua scripts in ``wrk/`` print
one ``WRK_JSON`` line that this module reads back (nothing is scraped from wrk's text report)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtest.constants import WRK_SCRIPTS_DIR
from loadtest.measure import child

SCRIPTS = WRK_SCRIPTS_DIR
TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float
    non_2xx: int
    socket_errors: int
    timeouts: int
    cpu_s: float = 0.0  # wrk's own CPU time (user + system)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PREFIX = "WRK_JSON "  # the line scripts/*.lua print at the end


def run(
    url: str,
    duration_s: float,
    connections: int,
    core: int | str,
    tokens: tuple[Path, int, int] | None = None,
    threads: int = 1,
    get_headers: dict[str, str] | None = None,
) -> WrkResult:
    """One wrk run of POSTs to ``url``; with ``tokens`` (file, first line, count) each request
    carries the next buyer token of that slice (each thread its own share of it); with
    ``get_headers``, GETs carrying those headers instead."""
    script = SCRIPTS / ("post_tokens.lua" if tokens else "post.lua")
    headers: list[str] = []
    if get_headers is not None:
        script = SCRIPTS / "get.lua"
        headers = [f"-H{name}: {value}" for name, value in get_headers.items()]
    argv = [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration_s))}s",
        f"--timeout={TIMEOUT_S}s", "--latency", *headers, "-s", str(script), url,
    ]  # fmt: skip
    if tokens:
        path, first, count = tokens
        argv += ["--", str(path), str(first), str(count), str(threads)]
    done = child.run(argv, PREFIX, what="wrk", timeout_s=duration_s + 60, core=core)
    return parse(done.result, done.cpu_s)


def spike(
    url: str, tokens: Path, buyers: int, connections: int, core: int, timeout_s: float
) -> tuple[dict[str, Any], bool, float]:
    """``spike.lua``: each of ``buyers`` (a token each, the file's first lines) buys once, as
    fast as they are answered, for ``timeout_s`` at most. (Its WRK_JSON summary, whether every
    buyer was answered, wrk's CPU seconds.)"""
    argv = [
        "wrk", "-t1", f"-c{connections}", f"-d{int(timeout_s) + 60}s", f"--timeout={TIMEOUT_S}s",
        "--latency", "-s", str(SCRIPTS / "spike.lua"), url,
        "--", str(tokens), "0", str(buyers), "1",
    ]  # fmt: skip
    done, answered = child.run_until(
        argv, PREFIX, "SPIKE_DONE", what="wrk", wait_s=timeout_s, core=core
    )
    return done.result, answered, done.cpu_s


def parse(raw: dict[str, int | float], cpu_s: float = 0.0) -> WrkResult:
    """A ``WRK_JSON`` summary as a result."""
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=int(raw["requests"]),
        duration_s=duration_s,
        rps=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=raw["p50_us"] / 1000,
        p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        p999_ms=raw["p999_us"] / 1000,
        max_ms=raw["max_us"] / 1000,
        mean_ms=raw["mean_us"] / 1000,
        non_2xx=int(raw["status_errors"]),
        socket_errors=int(raw["connect_errors"] + raw["read_errors"] + raw["write_errors"]),
        timeouts=int(raw["timeouts"]),
        cpu_s=cpu_s,
    )
