"""The relay's scan budget: every place is visited within ceil(n / budget) rounds."""

from __future__ import annotations

import pytest

from kernel.round_robin import RoundRobin


def test_a_short_list_is_taken_whole() -> None:
    scan = RoundRobin[int](5)
    assert scan.take([1, 2, 3]) == [1, 2, 3]
    assert scan.take([1, 2, 3]) == [1, 2, 3]


def test_a_long_list_is_covered_in_slices_that_wrap() -> None:
    scan = RoundRobin[int](4)
    places = list(range(10))
    rounds = [scan.take(places) for _ in range(3)]
    assert rounds == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert {p for r in rounds for p in r} == set(places)


def test_a_list_that_shrinks_between_rounds_is_still_covered() -> None:
    scan = RoundRobin[int](3)
    scan.take(list(range(10)))
    scan.take(list(range(10)))  # next would start at 6
    assert scan.take([0, 1, 2, 3, 4]) == [1, 2, 3]  # 6 % 5: wraps, nothing skipped twice
    assert scan.take([0, 1, 2, 3, 4]) == [4, 0, 1]


def test_a_zero_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        RoundRobin[int](0)
