"""The command line's rule (docs/cli.md, Conventions), over the whole parser: a command that
prints state has ``--json``, a command that changes state has ``--dry-run`` (``-n``). Every leaf
of the argparse tree must have both flags or be named below with the reason it has not, so a
new command that forgets one fails here until it gains the flag or a reason."""

from __future__ import annotations

import argparse

from flashsale.cli import build_parser
from flashsale.cli.parser import Parser, add_dry_run, add_json, command, subcommands
from tests.support.cli_tree import leaves, option_strings

# Commands without --json, and why.
NO_JSON = {
    # They print JSON and nothing else: the API's 201 body (docs/cli.md, JSON shapes).
    "sale create": "always prints JSON",
    "voucher create": "always prints JSON",
    # They run until stopped and log; their state is what `stack status` / `fleet status` and
    # the processes' /metrics show.
    "gateway": "long-running",
    "writer": "long-running (--once drains the topics and logs how far it got)",
    "failover-watch": "long-running",
    "demo": "long-running: a whole sale on the stack, then its report",
    # They print no state.
    "token": "prints a signed buyer token",
    "completion": "prints a shell script",
}

# Commands without --dry-run, and why.
NO_DRY_RUN = {
    # They read and print, changing nothing.
    "stack status": "reads only",
    "stack cpu": "reads only",
    "sale show": "reads only",
    "fleet status": "reads only",
    "watch": "reads only, until stopped",
    "voucher show": "reads only",
    "report": "reads the sale; writes only the PNG asked for (--out)",
    "fairness": "reads the sale; writes only the PNG asked for (--out)",
    "token": "signs a token; stores nothing",
    "completion": "prints a shell script",
    # They start long-running processes: what they would do is start what `stack status` /
    # `fleet status` shows as stopped (docs/cli.md, Conventions).
    "stack up": "starts the stack's servers",
    "fleet up": "starts the fleet's processes",
    "gateway": "long-running",
    "writer": "long-running (its --once, a drain of the topics, has no dry run either)",
    "failover-watch": "long-running",
    "demo": "long-running",
}


def _missing(parser: argparse.ArgumentParser, flags: set[str], exempt: dict[str, str]) -> list[str]:
    """The leaves, as ``a b``, that lack one of ``flags`` and are not exempt."""
    return [
        " ".join(path)
        for path, child in leaves(parser)
        if " ".join(path) not in exempt and not flags <= option_strings(child)
    ]


def test_every_command_that_prints_state_has_json() -> None:
    assert _missing(build_parser(), {"--json"}, NO_JSON) == []


def test_every_command_that_changes_state_has_a_dry_run() -> None:
    assert _missing(build_parser(), {"-n", "--dry-run"}, NO_DRY_RUN) == []


def test_each_exemption_names_a_command_that_lacks_the_flag() -> None:
    """A stale exemption (a command gone, renamed, or given the flag since) would let a later
    change drop the flag unnoticed: the lists hold exactly the commands without it."""
    found = {" ".join(path): option_strings(child) for path, child in leaves(build_parser())}
    assert len(found) > 25  # the walk reaches the nested commands
    for exempt, flag in ((NO_JSON, "--json"), (NO_DRY_RUN, "--dry-run")):
        for name in exempt:
            assert name in found, f"{name}: exempt from {flag} but not a command"
            assert flag not in found[name], f"{name} has {flag}: drop its exemption"


def test_a_new_command_that_forgets_a_flag_is_caught() -> None:
    """The check walks the tree as built (nested commands too), not a list of names."""
    top = Parser(prog="flashsale")
    commands = subcommands(top, "command")
    command(commands, "purge", "delete old orders")
    group = subcommands(command(commands, "shelf", "shelves"), "action")
    add_json(command(group, "show", "show a shelf"))
    both = command(group, "restock", "restock a shelf")
    add_json(both)
    add_dry_run(both, "what it would restock")
    assert _missing(top, {"--json"}, {}) == ["purge"]
    assert _missing(top, {"-n", "--dry-run"}, {}) == ["purge", "shelf show"]
    assert _missing(top, {"-n", "--dry-run"}, {"shelf show": "reads only"}) == ["purge"]
