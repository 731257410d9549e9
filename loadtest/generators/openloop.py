"""Open-loop load: POSTs at a fixed offered rate, whatever the server does, with each latency
measured from the request's INTENDED send time (so a stalled server is charged for the requests it
delayed: no coordinated omission), recorded in an HdrHistogram.

Request ``i`` is due at ``start + i / rate``. Due requests go to an idle keep-alive connection, or
wait in a queue (their clock already running) until one is free. Requests due in the first
``--warmup`` seconds are sent but not recorded. HTTP/1.1 over raw asyncio protocols on uvloop;
responses must carry ``Content-Length`` (the servers measured here all do).

Usage: python -m loadtest.generators.openloop URL --rate 5000 --duration 10 \
    [--tokens FILE --first N]
Prints a human summary and one ``OPENLOOP_JSON {...}`` line, which ``measure`` (the benchmark's
way to run it, pinned, in a subprocess of its own) reads back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import uvloop

from flashsale import http_retry
from loadtest.measure import child
from loadtest.measure.latency import Latencies

SUMMARY_PREFIX = "OPENLOOP_JSON "
SPIN_WINDOW_S = 0.002  # closer than this to the next due time: yield, don't sleep (timers are 1 ms)


@dataclass(frozen=True, slots=True)
class Plan:
    host: str
    port: int
    path: str
    rate: float
    duration_s: float
    warmup_s: float
    connections: int
    drain_s: float
    tokens: list[bytes] | None


class Connection(asyncio.Protocol):
    def __init__(self, gen: OpenLoop) -> None:
        self.gen = gen
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.intended = 0.0
        self.request = b""
        self.tries = 0  # sends of the request under way
        self.busy = False
        self.closed_by_peer = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def send(self, intended: float, request: bytes, tries: int = 1) -> None:
        assert self.transport is not None
        self.intended, self.request, self.tries = intended, request, tries
        self.busy = True
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                raise RuntimeError("response without Content-Length")
            line_end = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : line_end if line_end >= 0 else len(head)])
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            status = int(head[9:12])
            del self.buffer[:total]
            self.busy = False
            self.gen.completed(self, status)

    def eof_received(self) -> None:
        self.closed_by_peer = True

    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_by_peer = self.closed_by_peer or exc is not None
        self.gen.lost(self)


class OpenLoop:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.histogram = Latencies()
        # How late the generator itself dispatched each request (its loop busy elsewhere): the
        # part of the latencies that is the generator's, not the server's.
        self.dispatch_lag = Latencies()
        self.statuses: Counter[int] = Counter()
        self.connections: list[Connection] = []
        self.idle: list[Connection] = []
        self.queue: deque[tuple[float, bytes, int]] = deque()  # (intended, request, tries)
        self.in_flight = 0
        self.answered_total = 0  # warm-up included
        self.errors = 0
        self.resent = 0
        self.cpu_start = 0.0
        self.max_queue = 0
        self.start = 0.0
        self.measure_from = 0.0
        self.request = _requests(plan)

    def completed(self, conn: Connection, status: int) -> None:
        now = time.perf_counter()
        self.in_flight -= 1
        self.answered_total += 1
        if conn.intended >= self.measure_from:
            self.histogram.add_s(now - conn.intended)
            self.statuses[status] += 1
        self._next(conn)

    def lost(self, conn: Connection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.busy:
            conn.busy = False
            self.in_flight -= 1
            if conn.closed_by_peer and not conn.buffer and conn.tries < http_retry.ATTEMPTS:
                # Closed under the request before any answer (an idle close racing the reuse):
                # sent again first, its clock still running; every request here is idempotent
                # (a purchase per item and buyer; flashsale/http_retry.py).
                self.resent += 1
                self.queue.appendleft((conn.intended, conn.request, conn.tries + 1))
            else:
                self.errors += 1
        if conn.closed_by_peer:
            # A server or balancer closing an idle keep-alive connection: a client opens
            # another, as a browser would, so the pool keeps its size.
            asyncio.get_running_loop().create_task(self._reopen(conn))

    async def _reopen(self, old: Connection) -> None:
        plan = self.plan
        try:
            _, conn = await asyncio.get_running_loop().create_connection(
                lambda: Connection(self), plan.host, plan.port
            )
        except OSError:
            self.errors += 1
            return
        if old in self.connections:
            self.connections.remove(old)
        self.connections.append(conn)
        self._next(conn)

    def _next(self, conn: Connection) -> None:
        if not conn.usable():
            return  # closing: its connection_lost reopens it
        if self.queue:
            self.in_flight += 1
            conn.send(*self.queue.popleft())
        else:
            self.idle.append(conn)

    def _dispatch(self, intended: float, request: bytes) -> None:
        while self.idle and not self.idle[-1].usable():
            self.idle.pop()  # closed under us; connection_lost is on its way
        if self.idle:
            self.in_flight += 1
            self.idle.pop().send(intended, request)
        else:
            self.queue.append((intended, request, 1))
            self.max_queue = max(self.max_queue, len(self.queue))

    async def run(self) -> dict[str, Any]:
        plan = self.plan
        await self._connect()
        self.start = time.perf_counter() + 0.01
        self.cpu_start = time.process_time()
        self.measure_from = self.start + plan.warmup_s
        await self._send(self.start, plan.rate, int(plan.rate * (plan.warmup_s + plan.duration_s)))
        finished_sending = time.perf_counter()
        await self._drain()
        # Charge the unanswered at least the time they have waited so far.
        now = time.perf_counter()
        waiting = [c.intended for c in self.connections if c.busy] + [t for t, _, _ in self.queue]
        for intended in waiting:
            self.histogram.add_s(now - intended)
        self._close()
        return self._summary(len(waiting), finished_sending)

    async def _connect(self) -> None:
        plan = self.plan
        loop = asyncio.get_running_loop()
        for _ in range(plan.connections):
            _, conn = await loop.create_connection(lambda: Connection(self), plan.host, plan.port)
            self.connections.append(conn)
            self.idle.append(conn)

    async def _send(self, begin: float, rate: float, count: int, first: int = 0) -> None:
        """``count`` requests from request ``first`` on, the n-th due at ``begin + n / rate``."""
        n = 0
        while n < count:
            now = time.perf_counter()
            due = min(count, int((now - begin) * rate) + 1)
            while n < due:
                intended = begin + n / rate
                self.dispatch_lag.add_s(now - intended)
                self._dispatch(intended, self.request(first + n))
                n += 1
            wait = begin + n / rate - time.perf_counter()
            await asyncio.sleep(wait - SPIN_WINDOW_S / 2 if wait > SPIN_WINDOW_S else 0)

    async def _drain(self) -> None:
        """Wait for the answers still due, ``drain_s`` at most."""
        deadline = time.perf_counter() + self.plan.drain_s
        while (self.in_flight or self.queue) and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)

    def _close(self) -> None:
        for conn in self.connections:
            if conn.transport is not None:
                conn.transport.close()

    def _summary(self, unanswered: int, finished_sending: float) -> dict[str, Any]:
        h = self.histogram
        answered = sum(self.statuses.values())
        offered_window = self.plan.duration_s
        return {
            "offered_rps": self.plan.rate,
            "achieved_rps": answered / offered_window,
            "send_lag_ms": (finished_sending - (self.start + self.plan.warmup_s + offered_window))
            * 1000,
            "answered": answered,
            "answered_total": self.answered_total,
            "elapsed_s": (elapsed := time.perf_counter() - self.start),
            # Answers per second over the whole run, drain included: below the offered rate
            # when the server or the generator could not keep up.
            "throughput_rps": self.answered_total / elapsed,
            # The generator's own CPU share over the run (it spins between close sends, so this
            # is near 1 at any rate above a few hundred per second).
            "generator_busy": (time.process_time() - self.cpu_start) / elapsed,
            "dispatch_lag_p99_ms": self.dispatch_lag.ms(99),
            "dispatch_lag_max_ms": self.dispatch_lag.max_ms(),
            "unanswered": unanswered,
            "errors": self.errors,
            "resent": self.resent,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "max_queue": self.max_queue,
            **h.figures(),
            "mean_ms": h.mean_ms(),
        }


def _requests(plan: Plan) -> Callable[[int], bytes]:
    head = (
        f"POST {plan.path} HTTP/1.1\r\nHost: {plan.host}:{plan.port}\r\nContent-Length: 0\r\n"
    ).encode()
    if plan.tokens is None:
        request = head + b"\r\n"
        return lambda _i: request
    tokens = plan.tokens

    def with_token(i: int) -> bytes:
        return head + b"Authorization: Bearer " + tokens[i % len(tokens)] + b"\r\n\r\n"

    return with_token


def plan_for(url: str, **rest: Any) -> Plan:
    """The plan for ``url`` (host, port and path from it), the rest as given."""
    parts = urlsplit(url)
    return Plan(parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/", **rest)


def read_tokens(path: Path, first: int, count: int) -> list[bytes]:
    with path.open("rb") as lines:
        tokens = [line.rstrip(b"\n") for n, line in enumerate(lines) if first <= n < first + count]
    if len(tokens) < count:
        raise SystemExit(f"{path} has {len(tokens)} tokens from line {first}, {count} needed")
    return tokens


def measure(
    url: str,
    *,
    rate: float,
    duration_s: float,
    warmup_s: float,
    connections: int,
    core: int | str,
    tokens: Path | None = None,
    drain_s: float | None = None,
    timeout_s: float,
) -> dict[str, Any]:
    """One open-loop run in a subprocess pinned to ``core`` (so the generator's event loop never
    shares a process with the caller's); its ``OPENLOOP_JSON`` summary."""
    argv = [
        sys.executable, "-m", "loadtest.generators.openloop", url,
        "--rate", f"{rate:g}", "--duration", f"{duration_s:g}", "--warmup", f"{warmup_s:g}",
        "--connections", str(connections),
    ]  # fmt: skip
    if tokens is not None:
        argv += ["--tokens", str(tokens)]
    if drain_s is not None:
        argv += ["--drain", f"{drain_s:g}"]
    return child.summary(argv, SUMMARY_PREFIX, what="openloop", timeout_s=timeout_s, core=core)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.generators.openloop", description=__doc__
    )
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True, help="offered requests per second")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="unrecorded seconds first")
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--drain", type=float, default=10.0, help="seconds to wait at the end")
    parser.add_argument("--tokens", type=Path, help="buyer tokens, one per line, one per request")
    parser.add_argument("--first", type=int, default=0, help="first token line to use")
    args = parser.parse_args()
    count = int(args.rate * (args.warmup + args.duration))
    plan = plan_for(
        args.url,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        connections=args.connections,
        drain_s=args.drain,
        tokens=read_tokens(args.tokens, args.first, count) if args.tokens else None,
    )
    summary = uvloop.run(OpenLoop(plan).run())
    print(
        f"offered {summary['offered_rps']:.0f}/s achieved {summary['achieved_rps']:.0f}/s "
        f"p50 {summary['p50_ms']:.2f} p90 {summary['p90_ms']:.2f} p99 {summary['p99_ms']:.2f} "
        f"p99.9 {summary['p999_ms']:.2f} max {summary['max_ms']:.2f} ms "
        f"statuses {summary['statuses']} unanswered {summary['unanswered']}"
    )
    print(SUMMARY_PREFIX + json.dumps(summary))


if __name__ == "__main__":
    main()
