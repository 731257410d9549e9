"""``flashsale``: the one command-line entry point (stack, migrate, gateway, writer, jobs, vouchers,
demo)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kernel.settings import Settings, settings

Handler = Callable[[argparse.Namespace, Settings], int]


def _stack(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale import stack

    if args.action == "up":
        took = stack.up(cfg)
        from flashsale.migrate import migrate

        applied = migrate(cfg)
        print(f"stack: up in {took:.1f}s; migrations applied: {applied or 'none pending'}")
        _print_status(cfg)
    elif args.action == "down":
        stack.down(cfg)
    else:
        _print_status(cfg)
    return 0


def _print_status(cfg: Settings) -> None:
    from flashsale import stack

    for name, state in stack.status(cfg).items():
        print(f"  {name:<9} {state}")
    print(f"  logs      {cfg.log_dir}/")


def _migrate(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.migrate import migrate

    applied = migrate(cfg)
    print(f"migrations applied: {applied or 'none pending'}")
    return 0


def _gateway(args: argparse.Namespace, cfg: Settings) -> int:
    os.execv(sys.executable, [sys.executable, "-m", "gateway", *args.rest])  # noqa: S606


def _writer(args: argparse.Namespace, cfg: Settings) -> int:
    from writer.app import main as writer_main

    port = None if cfg.writer_metrics_port < 0 else cfg.writer_metrics_port
    return writer_main(cfg, once=args.once, metrics_port=port)


def _token(args: argparse.Namespace, cfg: Settings) -> int:
    from gateway.auth import sign_token

    print(sign_token(cfg, args.user_id, ttl_seconds=args.ttl))
    return 0


def _run_async(work: Callable[[Any, Any], Awaitable[int]], cfg: Settings) -> int:
    """Run ``work(pool, router)`` with a database pool and a shard router, then close both."""
    import asyncpg
    import uvloop

    from shard_router import ShardRouter

    async def main() -> int:
        pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=4)
        router = ShardRouter(cfg)
        await router.start()
        try:
            return await work(pool, router)
        finally:
            await router.close()
            await pool.close()

    return uvloop.run(main())


def _sale(args: argparse.Namespace, cfg: Settings) -> int:
    import datetime as dt

    import msgspec

    from domain.arm import arm_sale
    from domain.sales import NewItem, NewSale, create_sale

    async def work(pool: Any, router: Any) -> int:
        if args.action == "create":
            now = dt.datetime.now(dt.UTC)
            sale = NewSale(
                name=args.name,
                starts_at=now + dt.timedelta(seconds=args.starts_in),
                ends_at=now + dt.timedelta(seconds=args.starts_in + args.duration),
                payment_window_seconds=args.window,
                items=[
                    NewItem(
                        product_id=args.product,
                        quantity=args.quantity,
                        price=args.price,
                        shards=args.shards,
                    )
                ],
            )
            sale_id, item_ids = await create_sale(pool, sale)
            print(msgspec.json.encode({"saleId": sale_id, "itemIds": item_ids}).decode())
        else:
            for armed in await arm_sale(pool, router, args.sale_id):
                print(
                    f"item {armed.item_id}: {armed.units} units over {armed.shards} shards "
                    f"({armed.held} held)"
                )
        return 0

    return _run_async(work, cfg)


def _item(args: argparse.Namespace, cfg: Settings) -> int:
    async def work(pool: Any, router: Any) -> int:
        shards = await pool.fetchval(
            "select shards from flash_sale_item where id = $1", args.item_id
        )
        if shards is None:
            print(f"item {args.item_id} does not exist", file=sys.stderr)
            return 1
        if args.pause or args.resume:
            # A paused item answers SALE_NOT_OPEN (within the catalog's refresh interval) and
            # lets `reconcile --fix` rebuild its shards from the database.
            await pool.execute(
                "update flash_sale_item set paused = $2 where id = $1",
                args.item_id,
                bool(args.pause),
            )
            print(f"item {args.item_id} {'paused' if args.pause else 'resumed'}")
        for state in await router.shard_states(args.item_id, shards):
            print(
                f"shard {state.shard} on {state.node}: stock {state.stock}, holds "
                f"{state.holds}, buyers {state.buyers}, outbox {state.outbox}"
            )
        return 0

    return _run_async(work, cfg)


def _expiry(args: argparse.Namespace, cfg: Settings) -> int:
    import asyncio

    from jobs.expiry import expire_once, run_expiry

    async def work(pool: Any, router: Any) -> int:
        if args.once:
            print(f"expired {await expire_once(pool, router)} orders and voucher uses")
        else:
            await run_expiry(pool, router, cfg.expiry_interval_ms / 1000, asyncio.Event())
        return 0

    return _run_async(work, cfg)


def _reconcile(args: argparse.Namespace, cfg: Settings) -> int:
    from jobs.reconcile import reconcile, render_table
    from jobs.voucher_reconcile import reconcile_vouchers, render_voucher_table
    from shard_router import VoucherStore

    async def work(pool: Any, router: Any) -> int:
        drift = 0
        if args.item or not args.voucher:
            reports = await reconcile(cfg, pool, router, args.item or None, fix=args.fix)
            print(render_table(reports))
            drift += sum(r.drift for r in reports)
        if args.voucher or not args.item:
            vouchers = await reconcile_vouchers(
                cfg, pool, VoucherStore(router), args.voucher or None, fix=args.fix
            )
            print(render_voucher_table(vouchers))
            drift += sum(r.drift for r in vouchers)
        print(f"drift: {drift}")
        return 1 if drift else 0

    return _run_async(work, cfg)


def _voucher(args: argparse.Namespace, cfg: Settings) -> int:
    import datetime as dt

    import msgspec

    from domain.errors import NotReady
    from domain.voucher_arm import arm_voucher
    from domain.vouchers import NewVoucher, VoucherExists, create_voucher
    from jobs.reconcile import writer_lag
    from jobs.voucher_reconcile import reconcile_voucher, render_voucher_table
    from shard_router import VoucherStore

    async def arm(pool: Any, store: VoucherStore) -> int:
        try:
            armed = await arm_voucher(pool, store, args.code)
        except NotReady as exc:
            print(f"not armed: {exc}", file=sys.stderr)
            return 1
        print(
            f"voucher {armed.code}: {armed.remaining} uses left ({armed.held} held, "
            f"{armed.in_flight} in flight)"
        )
        return 0

    async def work(pool: Any, router: Any) -> int:
        store = VoucherStore(router)
        if args.action == "create":
            now = dt.datetime.now(dt.UTC)
            wanted = {
                "code": args.code,
                "discountAmount": args.discount,
                "minOrderAmount": args.min_order,
                "totalLimit": args.total,
                "perCustomerLimit": args.per_customer,
                "startsAt": now + dt.timedelta(seconds=args.starts_in),
                "endsAt": now + dt.timedelta(seconds=args.starts_in + args.duration),
                "isFlash": args.flash,
            }
            try:
                new = msgspec.convert(wanted, NewVoucher)
                voucher = await create_voucher(pool, new)
            except (msgspec.ValidationError, ValueError) as exc:
                print(f"invalid voucher: {exc}", file=sys.stderr)
                return 2
            except VoucherExists:
                print(f"voucher {args.code} exists", file=sys.stderr)
                return 1
            print(msgspec.json.encode(voucher).decode())
            return await arm(pool, store) if voucher.is_flash else 0
        if args.action == "arm":
            return await arm(pool, store)
        try:
            lag = writer_lag(cfg, cfg.vouchers_topic, cfg.voucher_writer_group)
            report = await reconcile_voucher(pool, store, args.code, lag)
        except LookupError as exc:
            print(str(exc), file=sys.stderr)
            return 1
        print(render_voucher_table([report]))
        return 0

    return _run_async(work, cfg)


def _demo(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.demo import run_demo

    return run_demo(cfg, buyers=args.buyers, units=args.units, shards=args.shards)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flashsale", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stack", help="start, stop or show the local Redis/Kafka/PostgreSQL stack")
    p.add_argument("action", choices=["up", "down", "status"])
    p.set_defaults(handler=_stack)

    p = sub.add_parser("migrate", help="apply pending database migrations")
    p.set_defaults(handler=_migrate)

    p = sub.add_parser("gateway", help="run the gateway (granian); extra args go to it")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(handler=_gateway)

    p = sub.add_parser("writer", help="run the Kafka → PostgreSQL order writer")
    p.add_argument("--once", action="store_true", help="drain what is there, then exit")
    p.set_defaults(handler=_writer)

    p = sub.add_parser("token", help="print a signed buyer token")
    p.add_argument("user_id", type=int)
    p.add_argument("--ttl", type=int, default=3600, help="seconds until it expires")
    p.set_defaults(handler=_token)

    p = sub.add_parser("sale", help="create or arm a sale")
    p.add_argument("action", choices=["create", "arm"])
    p.add_argument("sale_id", type=int, nargs="?", help="for arm")
    p.add_argument("--name", default="flash sale")
    p.add_argument("--product", default="sku-1")
    p.add_argument("--quantity", type=int, default=1000)
    p.add_argument("--price", type=int, default=9900)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--starts-in", type=int, default=0, help="seconds from now")
    p.add_argument("--duration", type=int, default=3600, help="seconds the sale is open")
    p.add_argument("--window", type=int, default=600, help="payment window in seconds")
    p.set_defaults(handler=_sale)

    p = sub.add_parser("item", help="show an item's live counters per shard; pause or resume it")
    p.add_argument("item_id", type=int)
    toggle = p.add_mutually_exclusive_group()
    toggle.add_argument("--pause", action="store_true", help="stop selling (for reconcile --fix)")
    toggle.add_argument("--resume", action="store_true", help="sell again")
    p.set_defaults(handler=_item)

    p = sub.add_parser("expiry", help="expire unpaid orders and release their units")
    p.add_argument("--once", action="store_true")
    p.set_defaults(handler=_expiry)

    p = sub.add_parser("reconcile", help="compare Redis with the database; non-zero on drift")
    p.add_argument("--item", type=int, action="append", help="only these items")
    p.add_argument("--voucher", action="append", help="only these vouchers (codes)")
    p.add_argument(
        "--fix",
        action="store_true",
        help="release stale holds; rebuild paused items' shards from the database",
    )
    p.set_defaults(handler=_reconcile)

    p = sub.add_parser("voucher", help="create a voucher, show its counters, or arm a flash one")
    p.add_argument("action", choices=["create", "show", "arm"])
    p.add_argument("code")
    p.add_argument("--discount", type=int, default=100_000, help="discount, minor units")
    p.add_argument("--min-order", type=int, default=0, help="minimum order amount")
    p.add_argument("--total", type=int, default=1000, help="total uses")
    p.add_argument("--per-customer", type=int, default=1, help="uses per customer")
    p.add_argument("--starts-in", type=int, default=0, help="seconds from now")
    p.add_argument("--duration", type=int, default=86_400, help="seconds the voucher is valid")
    p.add_argument("--flash", action="store_true", help="a flash voucher: uses go through Redis")
    p.set_defaults(handler=_voucher)

    p = sub.add_parser("demo", help="run a whole flash sale on the local stack")
    p.add_argument("--buyers", type=int, default=20_000)
    p.add_argument("--units", type=int, default=2_000)
    p.add_argument("--shards", type=int, default=4)
    p.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    started = time.monotonic()
    try:
        return handler(args, settings())
    except KeyboardInterrupt:
        return 130
    finally:
        if getattr(args, "timed", False):
            print(f"took {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
