"""A budget per round over a list that may change between rounds, wrapping around, so a
background scan's cost per round stays flat however many items are live."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class RoundRobin(Generic[T]):
    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError("budget must be at least 1")
        self.budget = budget
        self._next = 0

    def take(self, places: list[T]) -> list[T]:
        """The next ``budget`` of ``places``, continuing where the previous round stopped."""
        if len(places) <= self.budget:
            self._next = 0
            return places
        start = self._next % len(places)
        self._next = start + self.budget
        chunk = places[start : start + self.budget]
        return chunk + places[: self.budget - len(chunk)]
