"""How warm-up shares units over places (domain/warm_up.py's spread), without the stack."""

from __future__ import annotations

import random

import pytest

from domain.warm_up import spread


@pytest.mark.parametrize(
    ("units", "now", "shares"),
    [
        (40, [0, 0, 0, 0], [10, 10, 10, 10]),  # a first load: even
        (10, [0, 0, 0], [4, 3, 3]),
        (40, [10, 10, 9, 10], [10, 10, 10, 10]),  # the missing unit goes to the emptiest
        (12, [10, 2, 0, 0], [10, 2, 0, 0]),  # in balance: nothing moves
        (14, [10, 2, 0, 0], [10, 2, 1, 1]),
        (9, [10, 2, 0, 0], [7, 2, 0, 0]),  # too many: off the fullest first
        (3, [10, 2, 0, 0], [2, 1, 0, 0]),
        (0, [5, 5], [0, 0]),
        (7, [-3, 4], [3, 4]),  # a negative counter counts as empty
        (5, [], []),
    ],
)
def test_spread_moves_as_few_units_as_it_can(units: int, now: list[int], shares: list[int]) -> None:
    assert spread(units, now) == shares


def test_spread_always_shares_out_every_unit_and_never_below_zero() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        now = [rng.randint(-2, 50) for _ in range(rng.randint(1, 8))]
        units = rng.randint(0, 300)
        shares = spread(units, now)
        assert sum(shares) == units and min(shares) >= 0
        kept = [max(0, n) for n in now]
        if units >= sum(kept):  # only ever added to
            assert all(s >= n for s, n in zip(shares, kept, strict=True))
        else:  # only ever taken from
            assert all(s <= n for s, n in zip(shares, kept, strict=True))
