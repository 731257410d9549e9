"""docs/cli.md is complete: a section per command, naming each of its arguments, so a new
command or option cannot ship undocumented."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from flashsale.cli import build_parser
from kernel.settings import PROJECT_ROOT
from tests.support.cli_tree import leaves

DOC = (PROJECT_ROOT / "docs" / "cli.md").read_text()
EVERYWHERE = {"-h", "--help", "--debug"}  # said once, for every command


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command that runs something (a leaf), as ``flashsale a b``, and its parser."""
    for path, child in leaves(parser):
        yield " ".join(("flashsale", *path)), child


def _section(title: str) -> str:
    found = re.search(rf"^### `{re.escape(title)}`\n(.*?)(?=^#)", DOC, re.MULTILINE | re.DOTALL)
    assert found, f"docs/cli.md has no section ### `{title}`"
    return found.group(1)


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    names = []
    for action in parser._actions:
        if action.option_strings:
            names += [o for o in action.option_strings if o not in EVERYWHERE]
        elif not isinstance(action, argparse._SubParsersAction):
            names.append(str(action.metavar or action.dest))
    return names


def test_every_command_has_a_section_naming_each_of_its_arguments() -> None:
    commands = list(_commands(build_parser()))
    assert len(commands) > 25  # the walk reaches the nested commands
    for title, parser in commands:
        text = _section(title)
        for name in _arguments(parser):
            assert f"`{name}" in text, f"{title}: {name} is not in its docs/cli.md section"


def test_the_top_level_options_are_documented() -> None:
    assert _arguments(build_parser()) == ["--version"]
    assert "`--version`" in _section("flashsale")


def test_every_command_is_in_the_overview_table() -> None:
    table = DOC.split("## Conventions")[0]
    for title, _ in _commands(build_parser()):
        words = title.split()[1:]
        assert f"`{' '.join(words)}" in table or f"`{words[0]} " in table, title
