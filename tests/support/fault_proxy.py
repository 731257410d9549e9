"""A latency-adding TCP proxy for the fault tests: every chunk read from one side is written to
the other ``latency_s`` later, in order, so a slow network costs time but not throughput (a
delay line, not a bandwidth cap). ``latency_s`` may change while connections are open.

The proxies run on an event loop of their own in a daemon thread, so neither the test's blocking
steps nor the load's loop ever stall the traffic they carry.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

CHUNK = 65_536
START_TIMEOUT_S = 10.0
Line = asyncio.Queue[tuple[float, bytes]]  # (when due, chunk); b"" marks the end


class LatencyProxy:
    """Listens on ``listen`` (host:port) and forwards to ``target``."""

    def __init__(self, listen: str, target: str, latency_s: float = 0.0) -> None:
        self.listen = listen
        self.target = target
        self.latency_s = latency_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        host, port = self.listen.rsplit(":", 1)
        self._server = await asyncio.start_server(self._accept, host, int(port), reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        host, port = self.target.rsplit(":", 1)
        try:
            server_r, server_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        pumps = [
            self._spawn(self._pump(client_r, server_w)),
            self._spawn(self._pump(server_r, client_w)),
        ]
        # One side closing closes both, as a real connection through a router would.
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in pumps:
            task.cancel()
        for writer in (client_w, server_w):
            writer.close()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks as they come; a second task writes each once its due time is reached."""
        line: Line = asyncio.Queue()
        sender = self._spawn(self._deliver(line, writer))
        try:
            while chunk := await reader.read(CHUNK):
                line.put_nowait((time.monotonic() + self.latency_s, chunk))
            line.put_nowait((time.monotonic() + self.latency_s, b""))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()

    @staticmethod
    async def _deliver(
        line: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError):
            while True:
                due, chunk = await line.get()
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    return
                writer.write(chunk)
                await writer.drain()


class ProxyGroup:
    """Proxies on a loop thread of their own; ``set_latency`` changes all of them at once."""

    def __init__(self, proxies: Sequence[LatencyProxy]) -> None:
        self.proxies = list(proxies)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def set_latency(self, latency_s: float) -> None:
        for proxy in self.proxies:
            proxy.latency_s = latency_s  # a float store: safe to do from another thread

    def _run(self, coro: Any) -> Any:
        done: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return done.result(START_TIMEOUT_S)

    def start(self) -> None:
        self._thread.start()
        for proxy in self.proxies:
            self._run(proxy.start())

    def stop(self) -> None:
        for proxy in self.proxies:
            self._run(proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT_S)
        self._loop.close()


@contextmanager
def proxied(routes: Sequence[tuple[str, str]], latency_s: float = 0.0) -> Iterator[ProxyGroup]:
    """Proxies ``(listen, target)`` for the block, stopped after it."""
    group = ProxyGroup([LatencyProxy(listen, target, latency_s) for listen, target in routes])
    group.start()
    try:
        yield group
    finally:
        group.stop()
