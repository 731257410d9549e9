"""``flashsale voucher create|show|arm``: vouchers; a flash voucher's uses live in Redis.

``create`` takes the body of ``POST /admin/vouchers`` (``--from FILE``) or builds it from
options; either way it is decoded into the API's ``NewVoucher``, and a flash voucher is armed at
once, as the API does.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Mapping
from typing import Any

import msgspec

from domain.vouchers import Code, NewVoucher, VoucherExists, create_voucher, fetch_voucher
from flashsale.cli import output, views
from flashsale.cli.admin import Form, Group, Option, Subject, arming, moments, show
from flashsale.cli.admin import window as window_options
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_db, run_stack
from flashsale.cli.errors import Failure
from flashsale.cli.parser import integer
from kernel.settings import Settings

VOUCHER = Subject("voucher", "code", "CODE", Code)


def _body(o: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    starts_at, ends_at = moments(o)
    return {
        "code": args.code,
        "discountAmount": o["discount"],
        "minOrderAmount": o["min_order"],
        "totalLimit": o["total"],
        "perCustomerLimit": o["per_customer"],
        "startsAt": starts_at,
        "endsAt": ends_at,
        "isFlash": args.flash,
    }


FORM = Form(
    "voucher",
    NewVoucher,
    [
        Option(
            "--discount",
            "$.discountAmount",
            100_000,
            "discount in minor currency units, >= 1",
            integer,
            "AMOUNT",
        ),
        Option(
            "--min-order",
            "$.minOrderAmount",
            0,
            "smallest order amount it applies to, minor units, >= 0",
            integer,
            "AMOUNT",
        ),
        Option("--total", "$.totalLimit", 1000, "uses in all, 0-100000000", integer, "USES"),
        Option(
            "--per-customer",
            "$.perCustomerLimit",
            1,
            "uses per customer, 1-1000000",
            integer,
            "USES",
        ),
        *window_options("is valid", "valid", 86_400, ", a day"),
    ],
    _body,
    source_help="the voucher as the JSON body of POST /admin/vouchers; '-' reads stdin; CODE and "
    "the options below then do not apply",
    title="a voucher from options",
    flags={
        "flash": "a flash voucher: uses are taken in Redis, armed at once (default: ordinary, "
        "taken in PostgreSQL)"
    },
    positional="code",
    positional_help="the code buyers type: 1-64 of A-Z a-z 0-9 _ -",
)
VOUCHERS = Group(
    VOUCHER, "create a voucher, show its counters, arm a flash one", FORM, dry_run=True
)


async def _arm(pool: Any, store: Any, code: str, dry_run: bool = False) -> Any:
    from domain.voucher_arm import arm_voucher

    return await arming(f"voucher {code}", arm_voucher(pool, store, code, dry_run=dry_run))


async def _insert(pool: Any, new: NewVoucher) -> dict[str, Any]:
    """Create the voucher; its terms as CreatedVoucher's keyword arguments."""
    try:
        voucher = await create_voucher(pool, new)
    except VoucherExists:
        raise Failure(f"voucher {new.code} exists") from None
    return msgspec.structs.asdict(views.VoucherTerms.of(voucher))


@VOUCHERS.action("create", "create a voucher (a flash one is armed at once) and print it as JSON")
def _create(args: argparse.Namespace, cfg: Settings) -> int:
    new = FORM.read(args)  # before connecting: a refused voucher needs no database
    if args.dry_run:  # the validated body: what POST /admin/vouchers would store
        output.print_json(new)
        armed = "; a flash one would be armed at once" if new.is_flash else ""
        output.note(f"dry run: voucher {new.code} not created{armed}")
        return 0

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


@VOUCHERS.action("show", "print a voucher, its counters and its drift")
def _show(args: argparse.Namespace, cfg: Settings) -> int:
    code = str(VOUCHER.of(args))

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
        return show(
            args,
            views.VoucherShown(terms, views.check(report)),
            lambda: f"{render_voucher(terms)}\n\n{render_voucher_table([report])}",
        )

    return run_stack(cfg, work)


@VOUCHERS.action(
    "arm", "load a flash voucher's uses into Redis from the database (after a Redis loss)"
)
def _arm_command(args: argparse.Namespace, cfg: Settings) -> int:
    code = str(VOUCHER.of(args))

    async def work(pool: Any, router: Any) -> int:
        from shard_router import VoucherStore

        store = VoucherStore(router)
        voucher = await fetch_voucher(pool, code)
        if voucher is not None and voucher.is_flash:
            state = await store.state(code)
            if state.remaining is not None:
                now = dt.datetime.now(dt.UTC).timestamp()
                live = voucher.starts_at <= now < voucher.ends_at
                question = (
                    f"voucher {code} is armed ({state.remaining} uses left in Redis, "
                    f"{state.holds} held); arming it again reloads its uses from the database"
                    + (" while it is live" if live else "")
                )
                if args.dry_run:  # a dry run asks nothing: it says what arming would ask
                    output.note(f"arming would ask: {question}")
                else:
                    confirm(question, yes=args.yes)
        # Refuses an unknown or ordinary voucher; a dry run computes the same, loads nothing.
        armed = await _arm(pool, store, code, args.dry_run)
        if args.dry_run:
            output.note(f"dry run: voucher {code} not armed; arming would leave:")
        return show(
            args,
            views.ArmedVoucherView.of(armed),
            lambda: (
                f"voucher {armed.code}: {armed.remaining} uses left ({armed.held} held, "
                f"{armed.in_flight} in flight)"
            ),
        )

    return run_stack(cfg, work)


add_voucher = VOUCHERS.add_to
