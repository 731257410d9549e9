"""``flashsale room SALE_ID [--pause|--resume] [--rate N]``: a waiting room's controls and how
far its frontier has come; pause it, resume it or set its admission rate during the sale, as
``POST /admin/sales/{id}/room`` does (gateway/waiting_room/controls.py: the record in
PostgreSQL, then Redis, which every gateway's next tick obeys)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from domain.rules import RowId
from domain.sales import RoomControls
from flashsale.cli import output
from flashsale.cli.admin import show
from flashsale.cli.connect import run_stack
from flashsale.cli.errors import Failure, UsageError
from flashsale.cli.parser import Subcommands, add_dry_run, add_json, command, integer
from flashsale.cli.validate import convert
from kernel.settings import Settings

if TYPE_CHECKING:  # the handler imports it: --help loads no Redis client
    from gateway.waiting_room.controls import RoomState


def _wanted(args: argparse.Namespace) -> RoomControls | None:
    """The change the options ask for, checked as the API checks its body; None: only show."""
    body: dict[str, Any] = {}
    if args.pause or args.resume:
        body["paused"] = bool(args.pause)
    if args.rate is not None:
        body["ratePerSecond"] = args.rate
    if not body:
        return None
    return convert(body, RoomControls, {"$.ratePerSecond": "--rate"})


def render_room(state: RoomState) -> str:
    paused = "paused" if state.paused else "admitting"
    applied = "" if state.applied else " (not yet applied in Redis: the gateways' ticks will)"
    return (
        f"sale {state.sale_id}'s waiting room: {paused} at {state.rate_per_second}/s, "
        f"change {state.version}{applied}\n"
        f"  places given {state.joined}, admitted {state.admitted}, spent {state.spent}"
    )


def _room(args: argparse.Namespace, cfg: Settings) -> int:
    sale_id = int(convert(args.sale_id, RowId, {"$": "SALE_ID"}))
    wanted = _wanted(args)  # before connecting: a refused option needs no stack
    if args.dry_run and wanted is None:
        raise UsageError("--dry-run: only with --pause, --resume or --rate")

    async def work(pool: Any, router: Any) -> int:
        from gateway.waiting_room import controls

        default_rate = cfg.waiting_room_rate_per_s
        try:
            if wanted is None or args.dry_run:
                state = await controls.read(pool, router.client, sale_id, default_rate)
            else:
                state = await controls.change(pool, router.client, sale_id, wanted, default_rate)
        except controls.NoSuchSale:
            raise Failure(f"sale {sale_id} does not exist") from None
        except controls.NoRoom:
            raise Failure(f"sale {sale_id} has no waiting room") from None
        if wanted is not None and args.dry_run:
            state = controls.planned(state, wanted)
            output.note(f"dry run: sale {sale_id}'s waiting room not changed")
        elif wanted is not None:
            output.note(f"sale {sale_id}'s waiting room changed (change {state.version})")
        return show(args, state, lambda: render_room(state))

    return run_stack(cfg, work)


def add_room(sub: Subcommands) -> None:
    p = command(
        sub,
        "room",
        "show a sale's waiting room; pause it, resume it or set its admission rate",
        _room,
    )
    p.add_argument("sale_id", type=integer, metavar="SALE_ID", help="the sale's id")
    toggle = p.add_mutually_exclusive_group()
    toggle.add_argument(
        "--pause",
        action="store_true",
        help="admit nobody new (waiters keep their places; polls answer WAITING)",
    )
    toggle.add_argument(
        "--resume",
        action="store_true",
        help="admit again, from where it stopped (nobody is owed the paused time)",
    )
    p.add_argument(
        "--rate",
        type=integer,
        metavar="N",
        help="admissions per second from now on, 1-100000 (default: unchanged)",
    )
    add_dry_run(p, "the state the change would give")
    add_json(p)
