"""``flashsale sale create|show|arm``: a sale's life before and while it sells.

``create`` takes the body of ``POST /admin/sales`` (``--from FILE``, several items) or builds a
one-item body from options; either way it is decoded into the API's ``NewSale``.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from domain.rules import RowId
from domain.sales import NewSale, create_sale
from flashsale.cli import output, queries, views
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_db, run_stack
from flashsale.cli.errors import Failure
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

# Options of the one-item form, their defaults, and the API field each fills.
DEFAULTS: dict[str, Any] = {
    "name": "flash sale",
    "product": "sku-1",
    "quantity": 1000,
    "price": 9900,
    "shards": 4,
    "starts_in": 0,
    "duration": 3600,
    "window": 600,
}
OPTION_OF_FIELD = {
    "$.name": "--name",
    "$.items[0].productId": "--product",
    "$.items[0].quantity": "--quantity",
    "$.items[0].price": "--price",
    "$.items[0].shards": "--shards",
    "$.startsAt": "--starts-in",
    "$.endsAt": "--duration",
    "$.paymentWindowSeconds": "--window",
}


def sale_of_options(args: argparse.Namespace) -> NewSale:
    o = options_or_defaults(args, DEFAULTS)
    starts_at = moment(dt.datetime.now(dt.UTC), o["starts_in"], "--starts-in")
    body = {
        "name": o["name"],
        "startsAt": starts_at,
        "endsAt": moment(starts_at, o["duration"], "--duration"),
        "paymentWindowSeconds": o["window"],
        "items": [
            {
                "productId": o["product"],
                "quantity": o["quantity"],
                "price": o["price"],
                "shards": o["shards"],
            }
        ],
    }
    return convert(body, NewSale, OPTION_OF_FIELD)


def new_sale(args: argparse.Namespace) -> NewSale:
    if args.source is None:
        return sale_of_options(args)
    refuse_options_with_file(args, list(DEFAULTS), "sale")
    data, source = read_body(args.source)
    return decode(data, NewSale, source)


def _create(args: argparse.Namespace, cfg: Settings) -> int:
    sale = new_sale(args)  # before connecting: a refused sale needs no database

    async def work(pool: Any) -> int:
        sale_id, item_ids = await create_sale(pool, sale)
        output.print_json(views.CreatedSale.of(sale_id, item_ids, sale))
        return 0

    return run_db(cfg, work)


def sale_id_of(args: argparse.Namespace) -> int:
    return int(convert(args.sale_id, RowId, {"$": "SALE_ID"}))


async def fetch_sale(pool: Any, sale_id: int) -> views.Sale:
    row = await pool.fetchrow(queries.SALE, sale_id)
    if row is None:
        raise Failure(f"sale {sale_id} does not exist")
    items = [
        views.SaleItem(
            r["id"], r["product_id"], r["price"], r["quantity"], r["sold"], r["shards"], r["paused"]
        )
        for r in await pool.fetch(queries.SALE_ITEMS, sale_id)
    ]
    return views.Sale(
        sale_id,
        row["name"],
        row["starts_at"],
        row["ends_at"],
        row["payment_window_seconds"],
        row["armed_at"],
        row["on_sale"],
        items,
    )


def render_sale(sale: views.Sale) -> str:
    armed = "not armed" if sale.armed_at is None else f"armed {output.when(sale.armed_at)}"
    lines = [
        f"sale {sale.sale_id} {sale.name!r}: {armed}" + (", on sale now" if sale.on_sale else ""),
        f"  open {output.when(sale.starts_at)} to {output.when(sale.ends_at)}, "
        f"payment window {sale.payment_window_seconds} s",
        "",
        output.table(
            ["item", "product", "price", "quantity", "sold", "shards", "paused"],
            [
                [i.item_id, i.product_id, i.price, i.quantity, i.sold, i.shards, i.paused]
                for i in sale.items
            ],
        ),
    ]
    return "\n".join(lines)


def _show(args: argparse.Namespace, cfg: Settings) -> int:
    sale_id = sale_id_of(args)

    async def work(pool: Any) -> int:
        sale = await fetch_sale(pool, sale_id)
        if args.json:
            output.print_json(sale)
        else:
            print(render_sale(sale))
        return 0

    return run_db(cfg, work)


def _arm(args: argparse.Namespace, cfg: Settings) -> int:
    from domain.arm import arm_sale
    from domain.errors import NotReady
    from shard_router.stock_events import publish

    sale_id = sale_id_of(args)

    async def work(pool: Any, router: Any) -> int:
        sale = await fetch_sale(pool, sale_id)
        if sale.armed_at is not None:
            confirm(
                f"sale {sale_id} was armed at {output.when(sale.armed_at)}; arming it again "
                f"reloads the Redis shards of its {len(sale.items)} item(s) from the database"
                + (" while it is on sale" if sale.on_sale else ""),
                yes=args.yes,
            )
        try:
            armed = await arm_sale(pool, router, sale_id)
        except NotReady as exc:
            raise Failure(f"sale {sale_id} not armed: {exc}") from exc
        for item in armed:  # as the API does: gateways drop their sold-out flags for it
            await publish(router.client, "restock", item.item_id)
        if args.json:
            output.print_json(views.ArmedSale.of(sale_id, armed))
            return 0
        for a in armed:
            print(f"item {a.item_id}: {a.units} units over {a.shards} shards ({a.held} held)")
        return 0

    return run_stack(cfg, work)


def _add_create(actions: Subcommands) -> None:
    p = command(
        actions, "create", "create a sale (not yet armed) and print its ids as JSON", _create
    )
    d = DEFAULTS
    p.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="the sale as the JSON body of POST /admin/sales (several items allowed); "
        "'-' reads stdin; the one-item options below then do not apply",
    )
    item = p.add_argument_group("a one-item sale from options (each has a default)")
    item.add_argument("--name", help=f"the sale's name, 1-200 characters (default: {d['name']!r})")
    item.add_argument(
        "--product", help=f"the item's product id, 1-200 characters (default: {d['product']!r})"
    )
    item.add_argument(
        "--quantity",
        type=integer,
        help=f"units for sale, 0-100000000 (default: {d['quantity']})",
    )
    item.add_argument(
        "--price",
        type=integer,
        help=f"price in minor currency units, e.g. cents, >= 0 (default: {d['price']})",
    )
    item.add_argument(
        "--shards",
        type=integer,
        help=f"Redis stock shards the units are spread over, 1-256 (default: {d['shards']})",
    )
    item.add_argument(
        "--starts-in",
        type=integer,
        metavar="SECONDS",
        help=f"seconds from now until it opens; negative: already open (default: {d['starts_in']})",
    )
    item.add_argument(
        "--duration",
        type=at_least(1),
        metavar="SECONDS",
        help=f"seconds it stays open, >= 1 (default: {d['duration']})",
    )
    item.add_argument(
        "--window",
        type=integer,
        metavar="SECONDS",
        help=f"payment window: seconds a buyer has to pay, 1-86400 (default: {d['window']})",
    )


def add_sale(sub: Subcommands) -> None:
    parser = command(sub, "sale", "create a sale, show it with its items, arm it")
    actions = subcommands(parser, "action")
    _add_create(actions)

    p = command(actions, "show", "print a sale and its items", _show)
    p.add_argument("sale_id", type=integer, metavar="SALE_ID", help="the sale's id")
    add_json(p)

    p = command(
        actions,
        "arm",
        "load each item's stock into Redis from the database; refused until every primary "
        "has an in-sync replica",
        _arm,
    )
    p.add_argument("sale_id", type=integer, metavar="SALE_ID", help="the sale's id")
    add_yes(p, "re-arm a sale that is armed already")
    add_json(p)
