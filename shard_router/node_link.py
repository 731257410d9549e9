"""One connection to one Redis node, written to directly by the auto-pipeline.

Redis answers a connection's commands in the order it received them, so a batch is one
``transport.write`` and its replies are matched to it by position as hiredis parses them. This
replaces redis-py's connection + pipeline machinery on the hot path, which cost more Python per
command than the script call itself (an awaited read per reply, each under its own timeout):
bench.md has the before and after. redis-py's cluster client still owns the topology,
redirections and every cold-path command.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse


class Batch:
    """Commands sent together to one node, and their replies as they arrive.

    ``expected`` replies in all: one per call, plus one for an ``ASKING`` sent before the calls
    (``asking``) and one for a ``WAIT`` sent after them (``waits``). ``deadline`` is the loop time
    by which the calls must be answered; a redirected call keeps its first batch's deadline, and
    ``hops`` counts how often it was redirected.
    """

    __slots__ = (
        "node",
        "calls",
        "payload",
        "replies",
        "timer",
        "expected",
        "asking",
        "waits",
        "deadline",
        "hops",
    )

    def __init__(
        self,
        node: str,
        calls: list[Any],
        payload: bytes,
        deadline: float,
        *,
        waits: bool = False,
        asking: bool = False,
        hops: int = 0,
    ) -> None:
        self.node = node
        self.calls = calls
        self.payload = payload
        self.replies: list[Any] = []
        self.timer: asyncio.TimerHandle | None = None
        self.expected = len(calls) + waits + asking
        self.asking = asking
        self.waits = waits
        self.deadline = deadline
        self.hops = hops


class NodeLink(asyncio.Protocol):
    """Calls ``on_replies(batch)`` once every reply of a batch is in, ``on_lost(batch, exc)``
    for each batch the connection dropped (or never sent) before it was answered."""

    def __init__(
        self,
        on_replies: Callable[[Batch], None],
        on_lost: Callable[[Batch, BaseException], None],
    ) -> None:
        self._on_replies = on_replies
        self._on_lost = on_lost
        # Error replies become redis-py's exception types (MovedError, NoScriptError, ...), as
        # values, the way a pipeline run with raise_on_error=False returns them.
        self._reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error
        )
        self._answering: collections.deque[Batch] = collections.deque()
        self._unsent: list[Batch] = []
        self._transport: asyncio.Transport | None = None
        self.closed = False

    def send(self, batch: Batch) -> None:
        if self.closed:
            self._on_lost(batch, RedisConnectionError("connection closed"))
        elif self._transport is None:
            self._unsent.append(batch)  # written once the connection is made
        else:
            self._answering.append(batch)
            self._transport.write(batch.payload)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.closed:  # given up (its deadline passed) while it was connecting
            transport.abort()  # type: ignore[attr-defined]
            return
        # uvloop's transports do not subclass asyncio.Transport, but are one.
        self._transport = cast(asyncio.Transport, transport)
        unsent, self._unsent = self._unsent, []
        for batch in unsent:
            self.send(batch)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        answering = self._answering
        while answering:
            try:
                reply = self._reader.gets()
            except InvalidResponse as exc:
                self.fail(exc)
                return
            if reply is False:
                return
            batch = answering[0]
            batch.replies.append(reply)
            if len(batch.replies) == batch.expected:
                answering.popleft()
                self._on_replies(batch)

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop(exc or RedisConnectionError("connection closed by the server"))

    def fail(self, exc: BaseException) -> None:
        """Close for good (a connect failure, a garbled reply): every waiting batch is lost."""
        if self._transport is not None:
            self._transport.abort()
        self._drop(exc)

    def _drop(self, exc: BaseException) -> None:
        self.closed = True
        self._transport = None
        waiting = [*self._answering, *self._unsent]
        self._answering.clear()
        self._unsent.clear()
        for batch in waiting:
            self._on_lost(batch, exc)
