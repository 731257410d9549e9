"""``flashsale voucher create|show|arm``: vouchers; a flash voucher's uses live in Redis.

``create`` takes the body of ``POST /admin/vouchers`` (``--from FILE``) or builds it from
options; either way it is decoded into the API's ``NewVoucher``, and a flash voucher is armed at
once, as the API does.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import msgspec

from domain.vouchers import Code, NewVoucher, VoucherExists, create_voucher, fetch_voucher
from flashsale.cli import output, views
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_db, run_stack
from flashsale.cli.errors import Failure, UsageError
from flashsale.cli.inputs import moment, options_or_defaults, read_body, refuse_options_with_file
from flashsale.cli.parser import (
    Subcommands,
    add_json,
    add_yes,
    at_least,
    command,
    integer,
    subcommands,
)
from flashsale.cli.validate import convert, decode
from kernel.settings import Settings

DEFAULTS: dict[str, Any] = {
    "discount": 100_000,
    "min_order": 0,
    "total": 1000,
    "per_customer": 1,
    "starts_in": 0,
    "duration": 86_400,
}
OPTION_OF_FIELD = {
    "$.code": "CODE",
    "$.discountAmount": "--discount",
    "$.minOrderAmount": "--min-order",
    "$.totalLimit": "--total",
    "$.perCustomerLimit": "--per-customer",
    "$.startsAt": "--starts-in",
    "$.endsAt": "--duration",
}


def _voucher_of_options(args: argparse.Namespace) -> NewVoucher:
    if args.code is None:
        raise UsageError("CODE: is required (or give the whole voucher with --from FILE)")
    o = options_or_defaults(args, DEFAULTS)
    starts_at = moment(dt.datetime.now(dt.UTC), o["starts_in"], "--starts-in")
    body = {
        "code": args.code,
        "discountAmount": o["discount"],
        "minOrderAmount": o["min_order"],
        "totalLimit": o["total"],
        "perCustomerLimit": o["per_customer"],
        "startsAt": starts_at,
        "endsAt": moment(starts_at, o["duration"], "--duration"),
        "isFlash": args.flash,
    }
    return convert(body, NewVoucher, OPTION_OF_FIELD)


def new_voucher(args: argparse.Namespace) -> NewVoucher:
    if args.source is None:
        return _voucher_of_options(args)
    if args.code is not None:
        raise UsageError("--from: the file holds the whole voucher, its code too; drop CODE")
    refuse_options_with_file(args, [*DEFAULTS, "flash"], "voucher")
    data, source = read_body(args.source)
    return decode(data, NewVoucher, source)


def code_of(args: argparse.Namespace) -> str:
    return str(convert(args.code, Code, {"$": "CODE"}))


async def _arm(pool: Any, store: Any, code: str) -> Any:
    """arm_voucher, with its refusal as a Failure."""
    from domain.errors import NotReady
    from domain.voucher_arm import arm_voucher

    try:
        return await arm_voucher(pool, store, code)
    except NotReady as exc:
        raise Failure(f"voucher {code} not armed: {exc}") from exc


async def _insert(pool: Any, new: NewVoucher) -> dict[str, Any]:
    """Create the voucher; its terms as CreatedVoucher's keyword arguments."""
    try:
        voucher = await create_voucher(pool, new)
    except VoucherExists:
        raise Failure(f"voucher {new.code} exists") from None
    return msgspec.structs.asdict(views.VoucherTerms.of(voucher))


def _create(args: argparse.Namespace, cfg: Settings) -> int:
    new = new_voucher(args)  # before connecting: a refused voucher needs no database

    async def ordinary(pool: Any) -> int:  # taken in PostgreSQL: Redis is not needed
        output.print_json(views.CreatedVoucher(**await _insert(pool, new)))
        return 0

    async def flash(pool: Any, router: Any) -> int:
        from shard_router import ShardUnavailable, VoucherStore

        terms = await _insert(pool, new)
        try:  # created either way, as the API does; `voucher arm` arms it later
            armed = await _arm(pool, VoucherStore(router), new.code)
        except (Failure, ShardUnavailable) as exc:
            output.print_json(views.CreatedVoucher(**terms, armed=False, arm_error=str(exc)))
            raise Failure(f"{exc}; created, arm it later with `flashsale voucher arm`") from exc
        output.print_json(
            views.CreatedVoucher(
                **terms,
                armed=True,
                remaining=armed.remaining,
                held=armed.held,
                in_flight=armed.in_flight,
            )
        )
        return 0

    return run_stack(cfg, flash) if new.is_flash else run_db(cfg, ordinary)


def render_voucher(terms: views.VoucherTerms) -> str:
    kind = "flash" if terms.is_flash else "ordinary"
    return (
        f"voucher {terms.code}: {kind}, {terms.discount_amount} off orders of at least "
        f"{terms.min_order_amount}, {terms.total_limit} uses ({terms.per_customer_limit} per "
        f"customer)\n  valid {output.when(terms.starts_at)} to {output.when(terms.ends_at)}"
    )


def _show(args: argparse.Namespace, cfg: Settings) -> int:
    code = code_of(args)

    async def work(pool: Any, router: Any) -> int:
        from jobs.reconcile import writer_lag
        from jobs.voucher_reconcile import reconcile_voucher, render_voucher_table
        from shard_router import VoucherStore

        voucher = await fetch_voucher(pool, code)
        if voucher is None:
            raise Failure(f"voucher {code} does not exist")
        lag = writer_lag(cfg, cfg.vouchers_topic, cfg.voucher_writer_group)
        report = await reconcile_voucher(pool, VoucherStore(router), code, lag)
        terms = views.VoucherTerms.of(voucher)
        if args.json:
            output.print_json(views.VoucherShown(terms, views.VoucherCheck.of(report)))
        else:
            print(f"{render_voucher(terms)}\n\n{render_voucher_table([report])}")
        return 0

    return run_stack(cfg, work)


def _arm_command(args: argparse.Namespace, cfg: Settings) -> int:
    code = code_of(args)

    async def work(pool: Any, router: Any) -> int:
        from shard_router import VoucherStore

        store = VoucherStore(router)
        voucher = await fetch_voucher(pool, code)
        if voucher is not None and voucher.is_flash:
            state = await store.state(code)
            if state.remaining is not None:
                now = dt.datetime.now(dt.UTC).timestamp()
                live = voucher.starts_at <= now < voucher.ends_at
                confirm(
                    f"voucher {code} is armed ({state.remaining} uses left in Redis, "
                    f"{state.holds} held); arming it again reloads its uses from the database"
                    + (" while it is live" if live else ""),
                    yes=args.yes,
                )
        armed = await _arm(pool, store, code)  # refuses an unknown or ordinary voucher
        if args.json:
            output.print_json(views.ArmedVoucherView.of(armed))
        else:
            print(
                f"voucher {armed.code}: {armed.remaining} uses left ({armed.held} held, "
                f"{armed.in_flight} in flight)"
            )
        return 0

    return run_stack(cfg, work)


def _add_create(actions: Subcommands) -> None:
    p = command(
        actions,
        "create",
        "create a voucher (a flash one is armed at once) and print it as JSON",
        _create,
    )
    p.add_argument(
        "code", nargs="?", metavar="CODE", help="the code buyers type: 1-64 of A-Z a-z 0-9 _ -"
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="the voucher as the JSON body of POST /admin/vouchers; '-' reads stdin; CODE and "
        "the options below then do not apply",
    )
    d = DEFAULTS
    g = p.add_argument_group("a voucher from options (each has a default)")
    g.add_argument(
        "--discount",
        type=integer,
        metavar="AMOUNT",
        help=f"discount in minor currency units, >= 1 (default: {d['discount']})",
    )
    g.add_argument(
        "--min-order",
        type=integer,
        metavar="AMOUNT",
        help=f"smallest order amount it applies to, minor units, >= 0 (default: {d['min_order']})",
    )
    g.add_argument(
        "--total",
        type=integer,
        metavar="USES",
        help=f"uses in all, 0-100000000 (default: {d['total']})",
    )
    g.add_argument(
        "--per-customer",
        type=integer,
        metavar="USES",
        help=f"uses per customer, 1-1000000 (default: {d['per_customer']})",
    )
    g.add_argument(
        "--starts-in",
        type=integer,
        metavar="SECONDS",
        help=f"seconds from now until it is valid; negative: already valid (default: "
        f"{d['starts_in']})",
    )
    g.add_argument(
        "--duration",
        type=at_least(1),
        metavar="SECONDS",
        help=f"seconds it stays valid, >= 1 (default: {d['duration']}, a day)",
    )
    g.add_argument(
        "--flash",
        action="store_true",
        help="a flash voucher: uses are taken in Redis, armed at once (default: ordinary, "
        "taken in PostgreSQL)",
    )


def add_voucher(sub: Subcommands) -> None:
    parser = command(sub, "voucher", "create a voucher, show its counters, arm a flash one")
    actions = subcommands(parser, "action")
    _add_create(actions)

    p = command(actions, "show", "print a voucher, its counters and its drift", _show)
    p.add_argument("code", metavar="CODE", help="the voucher's code")
    add_json(p)

    p = command(
        actions,
        "arm",
        "load a flash voucher's uses into Redis from the database (after a Redis loss)",
        _arm_command,
    )
    p.add_argument("code", metavar="CODE", help="the voucher's code")
    add_yes(p, "re-arm a voucher that is armed already")
    add_json(p)
