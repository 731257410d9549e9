"""At most one WAIT in flight per node: a group commit.

Redis blocks a connection on WAIT, so batches written behind one each wait their turn and then a
replica round trip of their own, one after another. Instead, the calls flushed while a node has
a WAIT in flight are held here and go out together, under one WAIT, once it settles: under load
the batches grow instead of queueing, and one replica round trip confirms them all. A held call
keeps the deadline of the flush that first held it.
"""

from __future__ import annotations

from typing import Any


class GroupCommit:
    __slots__ = ("_in_flight", "_held")

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}  # node → batches with a WAIT not settled yet
        self._held: dict[str, tuple[float, list[Any]]] = {}  # node → (deadline, calls)

    def busy(self, node: str) -> bool:
        return node in self._in_flight

    def hold(self, node: str, calls: list[Any], deadline: float) -> None:
        held = self._held.get(node)
        if held is None:
            self._held[node] = (deadline, calls)
        else:
            held[1].extend(calls)

    def sent(self, node: str) -> None:
        self._in_flight[node] = self._in_flight.get(node, 0) + 1

    def settled(self, node: str) -> tuple[float, list[Any]] | None:
        """A WAIT batch of ``node`` was answered, or failed: the calls to send now, if any."""
        left = self._in_flight.get(node, 0) - 1
        if left > 0:
            self._in_flight[node] = left
            return None
        self._in_flight.pop(node, None)
        return self._held.pop(node, None)

    def drain(self) -> list[Any]:
        """Every held call (the pipeline is closing)."""
        calls = [call for _, held in self._held.values() for call in held]
        self._held.clear()
        self._in_flight.clear()
        return calls
