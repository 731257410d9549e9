"""``flashsale demo`` (a whole flash sale on the local stack) and ``flashsale token`` (a signed
buyer token, for curl and load tests)."""

from __future__ import annotations

import argparse
from typing import Annotated

import msgspec

from domain.sales import NewItem
from flashsale.cli.parser import Subcommands, at_least, command, integer
from flashsale.cli.validate import convert
from kernel.settings import Settings

# What gateway/auth.py accepts as a token's ``sub``: up to 18 decimal digits.
UserId = Annotated[int, msgspec.Meta(ge=0, le=10**18 - 1)]


def _demo(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.demo import run_demo

    # The demo's item obeys the API's item rules; its other fields do not come from options.
    item = {"productId": "demo", "quantity": args.units, "price": 0, "shards": args.shards}
    convert(item, NewItem, {"$.quantity": "--units", "$.shards": "--shards"})
    return run_demo(
        cfg,
        buyers=args.buyers,
        units=args.units,
        shards=args.shards,
        waiting_room=args.waiting_room,
    )


def _token(args: argparse.Namespace, cfg: Settings) -> int:
    from gateway.auth import sign_token

    user_id = int(convert(args.user_id, UserId, {"$": "USER_ID"}))
    print(sign_token(cfg, user_id, ttl_seconds=args.ttl))
    return 0


def add_demo(sub: Subcommands) -> None:
    p = command(
        sub,
        "demo",
        "run a whole flash sale on the local stack, with a crowd of buyers",
        _demo,
    )
    p.add_argument(
        "--buyers", type=at_least(1), default=20_000, help="distinct buyers (default: %(default)s)"
    )
    p.add_argument(
        "--units", type=integer, default=2_000, help="units on sale (default: %(default)s)"
    )
    p.add_argument(
        "--shards", type=integer, default=4, help="Redis stock shards, 1-256 (default: %(default)s)"
    )
    p.add_argument(
        "--waiting-room",
        action="store_true",
        help="the sale has a waiting room (docs/waiting-room.md): the crowd joins, polls and "
        "buys when admitted; ends with the fairness report",
    )


def add_token(sub: Subcommands) -> None:
    p = command(sub, "token", "print a signed buyer token (JWT) for curl and load tests", _token)
    p.add_argument("user_id", type=integer, metavar="USER_ID", help="the buyer's id, >= 0")
    p.add_argument(
        "--ttl",
        type=at_least(1),
        default=3600,
        metavar="SECONDS",
        help="seconds until it expires (default: %(default)s)",
    )
