"""``flashsale completion bash|zsh``: the script names every command and subcommand the parser
has, under its parent, and every option of a command; bash parses the bash one (zsh is not
installed here to parse its own)."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator

import pytest

from flashsale.cli import build_parser
from flashsale.cli.completion import script
from tests.support.cli_boundary import run


def _tree(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[str], argparse.ArgumentParser]]:
    """(path, its subcommands' names, its parser) for the top and every command under it."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names = [name for action in subs for name in action.choices]
    yield path, names, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _tree(child, (*path, name))


def _ident(path: tuple[str, ...]) -> str:
    return "_".join(("_shtab_flashsale", *path)).replace("-", "_")


def test_the_tree_is_the_whole_command_line() -> None:  # the walk below misses nothing
    tree = {path: names for path, names, _ in _tree(build_parser())}
    assert "completion" in tree[()] and "watch" in tree[()]
    assert tree[("fleet",)] == ["up", "down", "status"]
    assert len(tree) > 25


def test_the_bash_script_names_every_subcommand_under_its_parent_and_every_option() -> None:
    text = script("bash")
    for path, names, parser in _tree(build_parser()):
        if names:
            found = re.search(rf"^{_ident(path)}_subparsers=\((.*)\)$", text, re.MULTILINE)
            assert found, f"flashsale {' '.join(path)}: no subcommand list"
            assert found.group(1).split() == names, path
        options = re.search(rf"^{_ident(path)}_option_strings=\((.*)\)$", text, re.MULTILINE)
        assert options, f"flashsale {' '.join(path)}: no option list"
        wanted = {flag for action in parser._actions for flag in action.option_strings}
        assert set(options.group(1).split()) == wanted, path
    checked = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_the_zsh_script_names_every_subcommand_under_its_parent() -> None:
    text = script("zsh")
    assert text.startswith("#compdef flashsale\n")
    for path, names, _ in _tree(build_parser()):
        if not names:
            continue
        block = re.search(
            rf"^{_ident(path)}_commands\(\) {{\n  local _commands=\(\n(.*?)\n  \)",
            text,
            re.MULTILINE | re.DOTALL,
        )
        assert block, f"flashsale {' '.join(path)}: no command list"
        listed = [line.strip().split(":", 1)[0] for line in block.group(1).splitlines()]
        assert sorted(listed) == sorted(names), path


def test_the_command_prints_the_script_and_refuses_another_shell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran = run(capsys, "completion", "bash")
    assert (ran.status, ran.out) == (0, script("bash"))
    refused = run(capsys, "completion", "fish")
    assert refused.status == 2
    assert refused.err == "flashsale: SHELL: invalid choice: 'fish' (choose from 'bash', 'zsh')\n"
