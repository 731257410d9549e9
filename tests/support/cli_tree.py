"""The command line's argparse tree, walked: the top and every command under it, and the leaves
(the commands that run something). argparse keeps subcommands in private attributes
(``_actions``, ``_SubParsersAction``); the one walk over them is here."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

Path = tuple[str, ...]  # ("fleet", "up"); () is `flashsale` itself


def tree(
    parser: argparse.ArgumentParser, path: Path = ()
) -> Iterator[tuple[Path, list[str], argparse.ArgumentParser]]:
    """(path, its subcommands' names, its parser) for ``parser`` and every command under it."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, [name for action in subs for name in action.choices], parser
    for action in subs:
        for name, child in action.choices.items():
            yield from tree(child, (*path, name))


def leaves(parser: argparse.ArgumentParser) -> Iterator[tuple[Path, argparse.ArgumentParser]]:
    """Each command that runs something (it has no subcommands) and its parser."""
    for path, names, child in tree(parser):
        if not names:
            yield path, child


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}
