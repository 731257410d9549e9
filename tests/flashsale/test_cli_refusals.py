"""Each of the command line's argument rules, broken: one line naming the option on stderr,
nothing on stdout, exit status 2, before any server is touched. In process (``main`` with the
arguments), so the whole list costs no interpreter starts; tests/flashsale/test_cli.py runs a few
through the real ``python -m flashsale`` as well."""

from __future__ import annotations

import pytest

from flashsale.cli.main import main

REFUSALS = [
    (["sale", "create", "--quantity", "-5"], "--quantity: must be at least 0"),
    (["sale", "create", "--quantity", "100000001"], "--quantity: must be at most 100000000"),
    (["sale", "create", "--quantity", "x"], "--quantity: must be an integer, got 'x'"),
    (["sale", "create", "--price", "-1"], "--price: must be at least 0"),
    (["sale", "create", "--shards", "0"], "--shards: must be at least 1"),
    (["sale", "create", "--shards", "257"], "--shards: must be at most 256"),
    (["sale", "create", "--name="], "--name: must not be empty"),
    (["sale", "create", "--product", "p" * 201], "--product: must have at most 200 characters"),
    (["sale", "create", "--window", "0"], "--window: must be at least 1"),
    (["sale", "create", "--window", "86401"], "--window: must be at most 86400"),
    (["sale", "create", "--duration", "0"], "--duration: must be at least 1"),
    (["sale", "create", "--starts-in", str(10**12)], "--starts-in: 1000000000000 s from now"),
    (["sale", "create", "--from", "-", "--quantity", "3"], "--from: the file holds the whole"),
    (["sale", "create", "--from", "/no/such/sale.json"], "--from: cannot read /no/such/sale.json"),
    (["sale", "show", "0"], "SALE_ID: must be at least 1"),
    (["sale", "show", "abc"], "SALE_ID: must be an integer, got 'abc'"),
    (["sale", "arm"], "the following arguments are required: SALE_ID"),
    (["item", "0"], "ITEM_ID: must be at least 1"),
    (["item", "1", "--pause", "--resume"], "--resume: not allowed with argument --pause"),
    (["reconcile", "--item", "-1"], "--item: must be at least 1"),
    (["reconcile", "--voucher", "no spaces"], "--voucher: must be 1 to 64 of the characters"),
    (["voucher", "create"], "CODE: is required"),
    (["voucher", "create", "bad code"], "CODE: must be 1 to 64 of the characters"),
    (["voucher", "create", "X\n"], "CODE: must be 1 to 64 of the characters"),
    (["voucher", "create", "X", "--discount", "0"], "--discount: must be at least 1"),
    (["voucher", "create", "X", "--min-order", "-1"], "--min-order: must be at least 0"),
    (["voucher", "create", "X", "--total", "-1"], "--total: must be at least 0"),
    (["voucher", "create", "X", "--per-customer", "0"], "--per-customer: must be at least 1"),
    (["voucher", "create", "X", "--from", "-"], "--from: the file holds the whole voucher"),
    (["voucher", "show", "a/b"], "CODE: must be 1 to 64 of the characters"),
    (["voucher", "arm", "a/b"], "CODE: must be 1 to 64 of the characters"),
    (["token", "-1"], "USER_ID: must be at least 0"),
    (["token", "1", "--ttl", "0"], "--ttl: must be at least 1"),
    (["demo", "--shards", "0"], "--shards: must be at least 1"),
    (["demo", "--units", "-1"], "--units: must be at least 0"),
    (["gateway", "--port", "0"], "--port: must be at least 1"),
    (["no-such-command"], "COMMAND: invalid choice: 'no-such-command'"),
]


@pytest.mark.parametrize(("args", "line"), REFUSALS, ids=[" ".join(a)[:40] for a, _ in REFUSALS])
def test_a_broken_rule_is_one_line_naming_the_option(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"flashsale: {line}"), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert out == ""
