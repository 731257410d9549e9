"""``flashsale item ITEM_ID [--pause|--resume]``: an item's live counters per shard; pausing it
stops its sales (buyers get SALE_NOT_OPEN) and lets ``reconcile --fix`` rebuild its shards."""

from __future__ import annotations

import argparse
from typing import Any

from domain.rules import RowId
from flashsale.cli import output, queries, views
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_stack
from flashsale.cli.errors import Failure, UsageError
from flashsale.cli.parser import Subcommands, add_dry_run, add_json, add_yes, command, integer
from flashsale.cli.validate import convert
from kernel.settings import Settings


async def _set_paused(
    pool: Any, item_id: int, row: Any, pause: bool, cfg: Settings, yes: bool, dry_run: bool
) -> None:
    if row["paused"] == pause:
        output.note(f"item {item_id} was {'paused' if pause else 'not paused'} already")
        return
    if pause and row["on_sale"]:
        question = (
            f"item {item_id} is on sale now (sale {row['sale_id']}, open until "
            f"{output.when(row['ends_at'])}); pausing it stops its sales: buyers get "
            f"SALE_NOT_OPEN within {cfg.item_cache_seconds:g} s (the gateways' catalog refresh)"
        )
        if dry_run:
            output.note(f"pausing would ask: {question}")
        else:
            confirm(question, yes=yes)
    if dry_run:
        output.note(f"dry run: item {item_id} not {'paused' if pause else 'resumed'}")
        return
    await pool.execute("update flash_sale_item set paused = $2 where id = $1", item_id, pause)
    output.note(f"item {item_id} {'paused' if pause else 'resumed'}")


def render_item(item: views.Item, sale_id: int) -> str:
    head = (
        f"item {item.item_id} (sale {sale_id}): quantity {item.quantity}, sold {item.sold}, "
        f"units left {item.units_left}, paused {'yes' if item.paused else 'no'}"
    )
    shards = output.table(
        ["shard", "node", "stock", "holds", "buyers", "outbox"],
        [[s.shard, s.node, s.stock, s.holds, s.buyers, s.outbox] for s in item.shards],
    )
    return f"{head}\n\n{shards}"


def _item(args: argparse.Namespace, cfg: Settings) -> int:
    item_id = int(convert(args.item_id, RowId, {"$": "ITEM_ID"}))
    change = args.pause or args.resume
    if args.dry_run and not change:
        raise UsageError("--dry-run: only with --pause or --resume")

    async def work(pool: Any, router: Any) -> int:
        row = await pool.fetchrow(queries.ITEM, item_id)
        if row is None:
            raise Failure(f"item {item_id} does not exist")
        paused = row["paused"]
        if change:
            await _set_paused(pool, item_id, row, bool(args.pause), cfg, args.yes, args.dry_run)
            if args.dry_run:  # the item as the change would leave it
                paused = bool(args.pause)
            else:
                row = await pool.fetchrow(queries.ITEM, item_id)
                paused = row["paused"]
        states = await router.shard_states(item_id, row["shards"])
        item = views.Item.of(item_id, row["quantity"], row["sold"], paused, states)
        if args.json:
            output.print_json(item)
        else:
            print(render_item(item, row["sale_id"]))
        return 0

    return run_stack(cfg, work)


def add_item(sub: Subcommands) -> None:
    p = command(sub, "item", "show an item's live counters per shard; pause or resume it", _item)
    p.add_argument("item_id", type=integer, metavar="ITEM_ID", help="the item's id")
    toggle = p.add_mutually_exclusive_group()
    toggle.add_argument(
        "--pause",
        action="store_true",
        help="stop selling it (buyers get SALE_NOT_OPEN); lets `reconcile --fix` rebuild it",
    )
    toggle.add_argument("--resume", action="store_true", help="sell it again")
    add_yes(p, "pause an item that is on sale")
    add_dry_run(p, "the item as --pause or --resume would leave it")
    add_json(p)
