"""The operator command line as an operator meets it: the real ``python -m flashsale`` in a
subprocess, against the real stack. A refusal is one line and an exit status (2: usage, 1:
failure), never a traceback; --json parses back into the documented shapes (docs/cli.md);
dangerous steps ask on a terminal (a pty here) and refuse off one without --yes."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
from redis.asyncio.cluster import RedisCluster

from domain.sales import decode_new_sale
from domain.vouchers import decode_new_voucher
from flashsale.cli import build_parser
from kernel.settings import PROJECT_ROOT, Settings
from shard_router import shard_keys
from tests.flashsale.test_cli_refusals import REFUSALS
from tests.support.cli_tree import leaves

pytestmark = pytest.mark.integration

TIMEOUT_S = 120
READY_TIMEOUT_S = 60


@dataclass(frozen=True)
class Run:
    status: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def flashsale(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Run:
    """The command line with stdin a pipe (``stdin``) or /dev/null: never a terminal."""
    done = subprocess.run(
        [sys.executable, "-m", "flashsale", *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, **(env or {})},
        timeout=TIMEOUT_S,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def on_terminal(*args: str, answer: str) -> Run:
    """The command line with stdin a terminal (a pty) on which ``answer`` is typed."""
    leader, follower = os.openpty()
    try:
        with subprocess.Popen(
            [sys.executable, "-m", "flashsale", *args],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        ) as proc:
            os.write(leader, f"{answer}\n".encode())  # the terminal holds the line until read
            out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        os.close(follower)
        os.close(leader)
    return Run(proc.returncode, out, err)


def ok(run: Run) -> Run:
    assert run.status == 0, run
    return run


def refused(run: Run, status: int) -> str:
    """The one line a refusal prints, once its shape is checked."""
    assert run.status == status, run
    assert "Traceback" not in run.err, run.err
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashsale: "), run.err
    return lines[0]


def sale_body(items: int = 3, opens_in_s: int = -5) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    return {
        "name": "cli test",
        "startsAt": (now + dt.timedelta(seconds=opens_in_s)).isoformat(),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat(),
        "paymentWindowSeconds": 300,
        "items": [
            {"productId": f"sku-{k}", "quantity": 10 * (k + 1), "price": 100 + k, "shards": k + 1}
            for k in range(items)
        ],
    }


def arm_when_ready(*args: str) -> Run:
    """``sale arm`` / ``voucher arm``, polled while arming is refused as not ready (a replica
    out of sync: fault tests of other packages may be restarting a Redis node meanwhile)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        run = flashsale(*args, "--yes")
        if run.status != 1 or "not armed" not in run.err or time.monotonic() > deadline:
            return ok(run)
        time.sleep(0.5)


@dataclass(frozen=True)
class LiveSale:
    sale_id: int
    item_id: int


@pytest.fixture
def live_sale(live_stack: Settings) -> LiveSale:
    """A one-item sale, open and armed: on sale now."""
    created = ok(
        flashsale("sale", "create", "--quantity", "8", "--shards", "2", "--starts-in", "-5")
    )
    sale = created.json()
    arm_when_ready("sale", "arm", str(sale["saleId"]))
    return LiveSale(sale["saleId"], sale["items"][0]["itemId"])


@pytest.fixture
def flash_voucher(live_stack: Settings) -> str:
    code = f"CLI-{uuid.uuid4().hex[:12]}"
    created = flashsale("voucher", "create", code, "--flash", "--total", "5")
    if created.status == 1 and "created, arm it later" in created.err:
        arm_when_ready("voucher", "arm", code)
    else:
        assert ok(created).json()["armed"] is True
    return code


# --- help -------------------------------------------------------------------------------------


def test_help_lists_the_commands_in_the_order_of_a_sale_s_life() -> None:
    text = ok(flashsale("--help")).out
    life = [
        "stack",
        "migrate",
        "sale",
        "gateway",
        "writer",
        "fleet",
        "item",
        "room",
        "watch",
        "expiry",
        "failover-watch",
        "reconcile",
        "report",
        "fairness",
        "voucher",
        "demo",
        "token",
        "completion",
    ]
    assert _listed(text) == life
    assert _listed(ok(flashsale("sale", "--help")).out) == ["create", "show", "arm"]
    assert _listed(ok(flashsale("voucher", "--help")).out) == ["create", "show", "arm"]


def _listed(help_text: str) -> list[str]:
    """The subcommands in the order ``--help`` lists them (indented by 4 under COMMAND)."""
    lines = help_text.splitlines()
    return [line.split()[0] for line in lines if line[:4] == "    " and line[4:5] != " "]


def test_every_option_has_a_help_text_with_its_default() -> None:
    for words, parser in leaves(build_parser()):
        path = " ".join(("flashsale", *words))
        for action in parser._actions:
            assert action.help, f"{path} {action.dest}: no help text"
            takes_value = action.option_strings and action.nargs != 0
            if takes_value and action.dest != "source":  # --from has no default
                assert "default" in action.help, f"{path} {action.option_strings}: no default"


# --- validation: the API's rules, one line each, exit 2 ---------------------------------------


# Every refusal is checked in process (tests/flashsale/test_cli_refusals.py, the fast tier);
# these through the real entry point too, as an operator meets them.
THROUGH_THE_COMMAND = [REFUSALS[0], REFUSALS[-1]]


@pytest.mark.parametrize(
    ("args", "line"), THROUGH_THE_COMMAND, ids=[" ".join(a)[:40] for a, _ in THROUGH_THE_COMMAND]
)
def test_a_broken_rule_is_one_line_naming_the_option(args: list[str], line: str) -> None:
    run = flashsale(*args)
    assert refused(run, 2).startswith(f"flashsale: {line}")
    assert run.out == ""


def _with(body: dict[str, Any], **changes: Any) -> str:
    return json.dumps({**body, **changes})


BAD_SALES = [
    (
        lambda b: _with(b, items=[b["items"][0], {**b["items"][1], "quantity": -5}]),
        "items[1].quantity: must be at least 0",
    ),
    (lambda b: _with(b, items=[{"productId": "p", "price": 1}]), "items[0].quantity: is required"),
    (lambda b: _with(b, colour="red"), "colour: is not a field of this request"),
    (lambda b: _with(b, items=[]), "items: must not be empty"),
    (lambda b: _with(b, endsAt=b["startsAt"]), "endsAt: must be after startsAt"),
    (lambda b: _with(b, startsAt="2030-01-01T12:00:00"), "startsAt: needs a time zone"),
    (lambda b: _with(b, name="a\u0000b"), "name: must not contain a NUL character"),
    (
        lambda b: _with(b, paymentWindowSeconds="600"),
        "paymentWindowSeconds: must be an integer, not a string",
    ),
    (lambda b: json.dumps(b)[:-1], "not valid JSON: Input data was truncated"),
    (lambda b: "[]", "must be a JSON object, not a JSON array"),
]


@pytest.mark.parametrize(("broken", "line"), BAD_SALES, ids=[line for _, line in BAD_SALES])
def test_a_sale_file_the_api_refuses_is_refused_naming_the_field(
    broken: Any, line: str, tmp_path: Path
) -> None:
    body = broken(sale_body())
    with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
        decode_new_sale(body.encode())  # what POST /admin/sales decodes with: a 400
    assert refused(flashsale("sale", "create", "--from", "-", stdin=body), 2) == (
        f"flashsale: --from stdin: {line}"
    )
    path = tmp_path / "sale.json"
    path.write_text(body)
    assert refused(flashsale("sale", "create", "--from", str(path)), 2) == (
        f"flashsale: --from {path}: {line}"
    )


def test_a_voucher_file_is_decoded_as_the_api_does(live_stack: Settings) -> None:
    now = dt.datetime.now(dt.UTC)
    body = {
        "code": f"CLI-{uuid.uuid4().hex[:12]}",
        "discountAmount": 500,
        "totalLimit": 3,
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat(),
    }
    bad = json.dumps({**body, "perCustomerLimit": 0})
    with pytest.raises(msgspec.ValidationError):
        decode_new_voucher(bad.encode())
    assert refused(flashsale("voucher", "create", "--from", "-", stdin=bad), 2) == (
        "flashsale: --from stdin: perCustomerLimit: must be at least 1"
    )
    created = ok(flashsale("voucher", "create", "--from", "-", stdin=json.dumps(body))).json()
    assert created == {
        **body,
        "minOrderAmount": 0,
        "perCustomerLimit": 1,
        "isFlash": False,
        "startsAt": now.isoformat().replace("+00:00", "Z"),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
    }
    again = flashsale("voucher", "create", "--from", "-", stdin=json.dumps(body))
    assert refused(again, 1) == f"flashsale: voucher {body['code']} exists"


# --- failures: exit 1, one line; --debug adds the traceback -----------------------------------


def test_what_does_not_exist_is_a_failure(live_stack: Settings) -> None:
    missing = str(2**63 - 1)
    assert (
        refused(flashsale("sale", "show", missing), 1)
        == f"flashsale: sale {missing} does not exist"
    )
    assert refused(flashsale("item", missing), 1) == f"flashsale: item {missing} does not exist"
    assert refused(flashsale("voucher", "show", "NO-SUCH-VOUCHER"), 1) == (
        "flashsale: voucher NO-SUCH-VOUCHER does not exist"
    )


def test_an_unreachable_database_is_one_line_and_debug_shows_the_traceback() -> None:
    down = {"FLASHSALE_PG_DSN": "postgresql://flashsale@127.0.0.1:1/flashsale"}
    line = refused(flashsale("sale", "show", "1", env=down), 1)
    assert line.startswith("flashsale: cannot reach the stack: ") and "--debug" in line
    debug = flashsale("sale", "show", "1", "--debug", env=down)
    assert debug.status == 1 and "Traceback (most recent call last)" in debug.err
    assert debug.err.splitlines()[-1].startswith("flashsale: cannot reach the stack: ")


# --- sales from a file and stdin; --json shapes ----------------------------------------------

SALE_KEYS = {
    "saleId",
    "name",
    "startsAt",
    "endsAt",
    "paymentWindowSeconds",
    "armedAt",
    "onSale",
    "items",
}
SALE_ITEM_KEYS = {"itemId", "productId", "price", "quantity", "sold", "shards", "paused"}


def _check_created(created: dict[str, Any], body: dict[str, Any]) -> None:
    assert set(created) == {"saleId", "items"}
    assert [(i["productId"], i["quantity"], i["shards"]) for i in created["items"]] == [
        (i["productId"], i["quantity"], i["shards"]) for i in body["items"]
    ]
    shown = ok(flashsale("sale", "show", str(created["saleId"]), "--json")).json()
    assert set(shown) == SALE_KEYS
    assert shown["saleId"] == created["saleId"] and shown["name"] == body["name"]
    assert shown["armedAt"] is None and shown["onSale"] is False
    assert shown["paymentWindowSeconds"] == body["paymentWindowSeconds"]
    assert dt.datetime.fromisoformat(shown["endsAt"]) == dt.datetime.fromisoformat(body["endsAt"])
    assert all(set(i) == SALE_ITEM_KEYS for i in shown["items"])
    assert [i["itemId"] for i in shown["items"]] == [i["itemId"] for i in created["items"]]
    assert [i["price"] for i in shown["items"]] == [i["price"] for i in body["items"]]


def test_a_multi_item_sale_from_a_file(live_stack: Settings, tmp_path: Path) -> None:
    body = sale_body(items=3)
    path = tmp_path / "sale.json"
    path.write_text(json.dumps(body))
    _check_created(ok(flashsale("sale", "create", "--from", str(path))).json(), body)


def test_a_multi_item_sale_from_stdin(live_stack: Settings) -> None:
    body = sale_body(items=2)
    _check_created(
        ok(flashsale("sale", "create", "--from", "-", stdin=json.dumps(body))).json(), body
    )


def test_sale_show_prints_the_sale_with_its_items(live_sale: LiveSale) -> None:
    text = ok(flashsale("sale", "show", str(live_sale.sale_id))).out
    assert f"sale {live_sale.sale_id} 'flash sale': armed " in text and "on sale now" in text
    assert any(line.split()[:2] == [str(live_sale.item_id), "sku-1"] for line in text.splitlines())
    shown = ok(flashsale("sale", "show", str(live_sale.sale_id), "--json")).json()
    assert shown["onSale"] is True and shown["armedAt"] is not None


def test_item_json_is_the_admin_api_s_shape(live_sale: LiveSale) -> None:
    item = ok(flashsale("item", str(live_sale.item_id), "--json")).json()
    assert set(item) == {"itemId", "quantity", "sold", "paused", "unitsLeft", "shards"}
    assert (item["itemId"], item["quantity"], item["unitsLeft"]) == (live_sale.item_id, 8, 8)
    assert [s["stock"] for s in item["shards"]] == [4, 4]
    assert all(
        set(s) == {"shard", "node", "stock", "holds", "buyers", "outbox"} for s in item["shards"]
    )


# What every reconcile entry ends with, after the item's or the voucher's own counts.
AUDIT_KEYS = {"holds", "outbox", "inFlight", "stale", "ghosts", "lost", "kafkaLag", "drift"}
ITEM_CHECK_KEYS = {"itemId", "quantity", "sold", "pending", "paid", "paused", "unitsLeft"}
ITEM_CHECK_KEYS |= AUDIT_KEYS
VOUCHER_CHECK_KEYS = {"code", "isFlash", "totalLimit", "usedCount", "reserved", "confirmed"}
VOUCHER_CHECK_KEYS |= {"remaining", *AUDIT_KEYS}


def test_reconcile_json(live_sale: LiveSale, flash_voucher: str) -> None:
    args = ["reconcile", "--item", str(live_sale.item_id), "--voucher", flash_voucher, "--json"]
    report = ok(flashsale(*args)).json()
    assert set(report) == {"drift", "fixed", "items", "vouchers"}
    assert (report["drift"], report["fixed"]) == (0, False)
    [item] = report["items"]
    assert set(item) == ITEM_CHECK_KEYS and item["itemId"] == live_sale.item_id
    [voucher] = report["vouchers"]
    assert set(voucher) == VOUCHER_CHECK_KEYS and voucher["code"] == flash_voucher
    assert voucher["remaining"] == 5
    only_items = ok(flashsale("reconcile", "--item", str(live_sale.item_id), "--json")).json()
    assert only_items["vouchers"] == []


def test_voucher_show_and_arm_json(flash_voucher: str) -> None:
    shown = ok(flashsale("voucher", "show", flash_voucher, "--json")).json()
    assert set(shown) == {"voucher", "check"}
    assert set(shown["voucher"]) == {
        "code",
        "discountAmount",
        "minOrderAmount",
        "totalLimit",
        "perCustomerLimit",
        "startsAt",
        "endsAt",
        "isFlash",
    }
    assert shown["voucher"]["isFlash"] is True and shown["voucher"]["totalLimit"] == 5
    assert set(shown["check"]) == VOUCHER_CHECK_KEYS and shown["check"]["drift"] == 0
    armed = ok(flashsale("voucher", "arm", flash_voucher, "--yes", "--json")).json()
    assert armed == {"code": flash_voucher, "remaining": 5, "held": 0, "inFlight": 0}


def test_sale_arm_json(live_sale: LiveSale) -> None:
    ok(flashsale("item", str(live_sale.item_id), "--pause", "--yes"))  # on sale: see below
    armed = ok(flashsale("sale", "arm", str(live_sale.sale_id), "--yes", "--json")).json()
    assert armed == {
        "saleId": live_sale.sale_id,
        "items": [{"itemId": live_sale.item_id, "shards": 2, "units": 8, "held": 0}],
    }


# --- dangerous steps ask ------------------------------------------------------------------------


async def _armed_at(db: asyncpg.Pool, sale_id: int) -> dt.datetime:
    moment: dt.datetime = await db.fetchval(
        "select armed_at from flash_sale where id = $1", sale_id
    )
    return moment


async def test_re_arming_a_sale_on_sale_is_refused(live_sale: LiveSale, db: asyncpg.Pool) -> None:
    sale = str(live_sale.sale_id)
    first = await _armed_at(db, live_sale.sale_id)
    line = refused(flashsale("sale", "arm", sale, "--yes"), 1)
    assert f"sale {sale} not armed: item {live_sale.item_id} is on sale now" in line
    assert "pause it first" in line
    assert await _armed_at(db, live_sale.sale_id) == first


async def test_re_arming_a_sale_asks(live_sale: LiveSale, db: asyncpg.Pool) -> None:
    sale = str(live_sale.sale_id)
    ok(flashsale("item", str(live_sale.item_id), "--pause", "--yes"))  # on sale: refused
    first = await _armed_at(db, live_sale.sale_id)
    line = refused(flashsale("sale", "arm", sale), 2)
    assert f"sale {sale} was armed at" in line and "pass --yes" in line

    no = on_terminal("sale", "arm", sale, answer="n")
    assert no.status == 1 and "arming it again reloads the Redis shards" in no.err
    assert no.err.rstrip().endswith("flashsale: answered no: nothing was changed")
    assert await _armed_at(db, live_sale.sale_id) == first

    yes = on_terminal("sale", "arm", sale, answer="y")
    assert yes.status == 0 and "Go on? [y/N]" in yes.err
    assert f"item {live_sale.item_id}: 8 units over 2 shards (0 held)" in yes.out
    second = await _armed_at(db, live_sale.sale_id)
    assert second > first

    ok(flashsale("sale", "arm", sale, "--yes"))
    assert await _armed_at(db, live_sale.sale_id) > second


async def _paused(db: asyncpg.Pool, item_id: int) -> bool:
    paused: bool = await db.fetchval("select paused from flash_sale_item where id = $1", item_id)
    return paused


async def test_pausing_an_item_on_sale_asks(live_sale: LiveSale, db: asyncpg.Pool) -> None:
    item = str(live_sale.item_id)
    line = refused(flashsale("item", item, "--pause"), 2)
    assert f"item {item} is on sale now" in line and "pass --yes" in line
    assert not await _paused(db, live_sale.item_id)

    no = on_terminal("item", item, "--pause", "--json", answer="n")
    assert no.status == 1 and no.out == "" and "buyers get SALE_NOT_OPEN" in no.err
    assert not await _paused(db, live_sale.item_id)

    yes = on_terminal("item", item, "--pause", "--json", answer="y")
    assert yes.status == 0 and json.loads(yes.out)["paused"] is True
    assert await _paused(db, live_sale.item_id)

    ok(flashsale("item", item, "--resume"))  # resuming does not ask
    assert not await _paused(db, live_sale.item_id)
    paused = ok(flashsale("item", item, "--pause", "--yes", "--json")).json()
    assert paused["paused"] is True and await _paused(db, live_sale.item_id)
    # paused: no longer on sale, so pausing again needs no answer
    ok(flashsale("item", item, "--pause"))


async def _stale_hold(redis: RedisCluster, db: asyncpg.Pool, item_id: int) -> None:
    """A hold Redis keeps for an order the database has ended: drift that --fix releases."""
    order_id, user_id = uuid.uuid4(), 424242
    now = dt.datetime.now(dt.UTC)
    await db.execute(
        "insert into flash_sale_order (id, item_id, user_id, shard, status, created_at,"
        " expires_at) values ($1, $2, $3, 0, 'EXPIRED', $4, $4)",
        order_id,
        item_id,
        user_id,
        now,
    )
    keys = shard_keys(item_id, 0)
    await redis.hset(keys.orders, str(order_id), str(user_id))
    await redis.decr(keys.stock)


async def test_fixing_drift_on_an_item_on_sale_asks(
    live_sale: LiveSale, db: asyncpg.Pool, redis: RedisCluster
) -> None:
    await _stale_hold(redis, db, live_sale.item_id)
    check = ["reconcile", "--item", str(live_sale.item_id), "--json"]
    drifted = flashsale(*check)
    assert drifted.status == 1 and drifted.json()["drift"] == 1  # --json keeps the exit status

    line = refused(flashsale(*check, "--fix"), 2)
    assert f"item {live_sale.item_id} (1 stale holds, drift 1)" in line and "pass --yes" in line

    no = on_terminal(*check, "--fix", answer="n")
    assert no.status == 1 and json.loads(no.out)["drift"] == 1
    assert "releases the holds of orders and uses that have ended" in no.err
    assert flashsale(*check).json()["drift"] == 1

    yes = on_terminal(*check, "--fix", answer="y")
    assert yes.status == 0, yes
    after = json.loads(yes.out)
    assert (after["drift"], after["fixed"], after["items"][0]["stale"]) == (0, True, 0)

    await _stale_hold(redis, db, live_sale.item_id)
    fixed = ok(flashsale(*check, "--fix", "--yes")).json()
    assert (fixed["drift"], fixed["fixed"]) == (0, True)
    ok(flashsale(*check, "--fix"))  # nothing to fix: nothing to ask


def test_re_arming_a_voucher_asks(flash_voucher: str) -> None:
    line = refused(flashsale("voucher", "arm", flash_voucher), 2)
    assert f"voucher {flash_voucher} is armed (5 uses left in Redis" in line
    no = on_terminal("voucher", "arm", flash_voucher, answer="n")
    assert no.status == 1 and "answered no" in no.err
    yes = on_terminal("voucher", "arm", flash_voucher, answer="y")
    assert yes.status == 0 and f"voucher {flash_voucher}: 5 uses left" in yes.out


def test_stack_status_json_names_every_part(live_stack: Settings) -> None:
    shape = json.loads(ok(flashsale("stack", "status", "--json")).out)
    assert set(shape) == {"parts", "logDir"}
    parts = shape["parts"]
    assert {"redis", "kafka", "postgres", "prometheus"} <= set(parts)
    assert parts["redis"].startswith(f"{len(live_stack.redis_nodes)}/{len(live_stack.redis_nodes)}")
    brokers = [name for name in parts if name.startswith("kafka-")]
    assert len(brokers) == (live_stack.kafka_brokers if live_stack.kafka_brokers > 1 else 0)


def test_stack_up_json_on_a_stack_up_is_its_status_and_what_it_applied(
    live_stack: Settings,
) -> None:
    up = ok(flashsale("stack", "up", "--json"))  # up already: checks each part, starts nothing
    shape = json.loads(up.out)
    assert set(shape) == {"parts", "logDir", "tookSeconds", "migrations"}
    assert shape["migrations"] == []  # live_stack migrated
    assert set(shape["parts"]) == set(ok(flashsale("stack", "status", "--json")).json()["parts"])
    assert "stack: redis ready in" in up.err  # the progress, off stdout
