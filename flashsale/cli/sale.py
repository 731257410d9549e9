"""``flashsale sale create|show|arm``: a sale's life before and while it sells.

``create`` takes the body of ``POST /admin/sales`` (``--from FILE``, several items) or builds a
one-item body from options; either way it is decoded into the API's ``NewSale``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from domain.errors import NotReady
from domain.rules import RowId
from domain.sales import NewSale, create_sale
from flashsale.cli import output, queries, views
from flashsale.cli.admin import Form, Group, Option, Subject, arming, moments, show
from flashsale.cli.admin import window as window_options
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_db, run_stack
from flashsale.cli.errors import Failure
from flashsale.cli.parser import integer
from kernel.settings import Settings

SALE = Subject("sale", "id", "SALE_ID", RowId, integer)


def _body(o: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    starts_at, ends_at = moments(o)
    item = {
        "productId": o["product"],
        "quantity": o["quantity"],
        "price": o["price"],
        "shards": o["shards"],
    }
    return {
        "name": o["name"],
        "startsAt": starts_at,
        "endsAt": ends_at,
        "paymentWindowSeconds": o["window"],
        "items": [item],
    }


FORM = Form(
    "sale",
    NewSale,
    [
        Option("--name", "$.name", "flash sale", "the sale's name, 1-200 characters"),
        Option(
            "--product", "$.items[0].productId", "sku-1", "the item's product id, 1-200 characters"
        ),
        Option("--quantity", "$.items[0].quantity", 1000, "units for sale, 0-100000000", integer),
        Option(
            "--price",
            "$.items[0].price",
            9900,
            "price in minor currency units, e.g. cents, >= 0",
            integer,
        ),
        Option(
            "--shards",
            "$.items[0].shards",
            4,
            "Redis stock shards the units are spread over, 1-256",
            integer,
        ),
        *window_options("opens", "open", 3600),
        Option(
            "--window",
            "$.paymentWindowSeconds",
            600,
            "payment window: seconds a buyer has to pay, 1-86400",
            integer,
            "SECONDS",
        ),
    ],
    _body,
    source_help="the sale as the JSON body of POST /admin/sales (several items allowed); "
    "'-' reads stdin; the one-item options below then do not apply",
    title="a one-item sale from options",
)
SALES = Group(SALE, "create a sale, show it with its items, arm it", FORM, dry_run=True)


@SALES.action("create", "create a sale (not yet armed) and print its ids as JSON")
def _create(args: argparse.Namespace, cfg: Settings) -> int:
    sale = FORM.read(args)  # before connecting: a refused sale needs no database
    if args.dry_run:  # the validated body: what POST /admin/sales would store
        output.print_json(sale)
        output.note(f"dry run: sale {sale.name!r} of {len(sale.items)} item(s) not created")
        return 0

    async def work(pool: Any) -> int:
        sale_id, item_ids = await create_sale(pool, sale)
        output.print_json(views.CreatedSale.of(sale_id, item_ids, sale))
        return 0

    return run_db(cfg, work)


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


@SALES.action("show", "print a sale and its items")
def _show(args: argparse.Namespace, cfg: Settings) -> int:
    sale_id = int(SALE.of(args))

    async def work(pool: Any) -> int:
        sale = await fetch_sale(pool, sale_id)
        return show(args, sale, lambda: render_sale(sale))

    return run_db(cfg, work)


@SALES.action(
    "arm",
    "load each item's stock into Redis from the database; refused until every primary has an "
    "in-sync replica",
)
def _arm(args: argparse.Namespace, cfg: Settings) -> int:
    from domain.arm import arm_sale
    from shard_router.stock_events import publish

    sale_id = int(SALE.of(args))

    async def work(pool: Any, router: Any) -> int:
        sale = await fetch_sale(pool, sale_id)
        if args.dry_run:
            return await _arm_plan(args, pool, router, sale)
        if sale.armed_at is not None:
            confirm(
                f"sale {sale_id} was armed at {output.when(sale.armed_at)}; arming it again "
                f"reloads the Redis shards of its {len(sale.items)} item(s) from the database"
                + (" while it is on sale" if sale.on_sale else ""),
                yes=args.yes,
            )
        armed = await arming(f"sale {sale_id}", arm_sale(pool, router, sale_id))
        for item in armed:  # as the API does: gateways drop their sold-out flags for it
            await publish(router.client, "restock", item.item_id)
        return show(
            args,
            views.ArmedSale.of(sale_id, armed),
            lambda: "\n".join(
                f"item {a.item_id}: {a.units} units over {a.shards} shards ({a.held} held)"
                for a in armed
            ),
        )

    return run_stack(cfg, work)


async def _arm_plan(args: argparse.Namespace, pool: Any, router: Any, sale: views.Sale) -> int:
    """--dry-run: the refusals arming would meet (read-only checks), then what it would load."""
    from domain.arm import refuse_if_on_sale

    async def checks() -> None:
        if not sale.items:
            raise NotReady(f"sale {sale.sale_id} has no items")
        await refuse_if_on_sale(pool, [i.item_id for i in sale.items])
        lagging = [n for n, ok in (await router.replicas_in_sync()).items() if not ok]
        if lagging:
            raise NotReady(f"primaries without an in-sync replica: {', '.join(sorted(lagging))}")

    await arming(f"sale {sale.sale_id}", checks())
    again = "" if sale.armed_at is None else f" (armed {output.when(sale.armed_at)}: it asks)"
    output.note(f"dry run: sale {sale.sale_id} not armed{again}")
    return show(
        args,
        sale,
        lambda: "\n".join(
            f"item {i.item_id}: would load its {i.quantity} units ({i.sold} sold) from the "
            f"database over {i.shards} shards, keeping the holds Redis has"
            for i in sale.items
        ),
    )


add_sale = SALES.add_to
