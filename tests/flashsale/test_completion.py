"""``flashsale completion bash|zsh``: the script names every command and subcommand the parser
has, under its parent, and every option of a command; then each shell loads its own script and
completes with it (bash through its completion function, zsh in a real interactive zsh on a
pseudo-terminal, with compinit, as a user's shell would)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from flashsale.cli import build_parser
from flashsale.cli.completion import script
from tests.support.cli_boundary import run
from tests.support.cli_tree import option_strings, tree


def _ident(path: tuple[str, ...]) -> str:
    return "_".join(("_shtab_flashsale", *path)).replace("-", "_")


def test_the_tree_is_the_whole_command_line() -> None:  # the walk below misses nothing
    found = {path: names for path, names, _ in tree(build_parser())}
    assert "completion" in found[()] and "watch" in found[()]
    assert found[("fleet",)] == ["up", "down", "status"]
    assert len(found) > 25


def test_the_bash_script_names_every_subcommand_under_its_parent_and_every_option() -> None:
    text = script("bash")
    for path, names, parser in tree(build_parser()):
        if names:
            found = re.search(rf"^{_ident(path)}_subparsers=\((.*)\)$", text, re.MULTILINE)
            assert found, f"flashsale {' '.join(path)}: no subcommand list"
            assert found.group(1).split() == names, path
        options = re.search(rf"^{_ident(path)}_option_strings=\((.*)\)$", text, re.MULTILINE)
        assert options, f"flashsale {' '.join(path)}: no option list"
        assert set(options.group(1).split()) == option_strings(parser), path
    checked = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_the_zsh_script_names_every_subcommand_under_its_parent() -> None:
    text = script("zsh")
    assert text.startswith("#compdef flashsale\n")
    for path, names, _ in tree(build_parser()):
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


def _bash_complete(words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` once the script is sourced (COMPREPLY)."""
    driver = (
        'source /dev/stdin; [[ $(complete -p flashsale) == *"-F _shtab_flashsale flashsale" ]]'
        ' || exit 3; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _shtab_flashsale;'
        ' printf "%s\\n" "${COMPREPLY[@]}"'
    )
    ran = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver, "bash", *words],
        input=script("bash"),
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.split()


def test_bash_completes_commands_subcommands_and_options_from_the_sourced_script() -> None:
    assert set(_bash_complete(["flashsale", ""])) == set(next(tree(build_parser()))[1])
    assert _bash_complete(["flashsale", "fleet", "st"]) == ["status"]
    assert _bash_complete(["flashsale", "completion", "z"]) == ["zsh"]
    assert _bash_complete(["flashsale", "fleet", "up", "--gat"]) == ["--gateways"]


# An interactive zsh on a pseudo-terminal (zsh/zpty): compinit with the script's directory on
# $fpath, as the docs install it, and Tab bound to a widget that completes the typed line, prints
# the result between markers and exits. The marker is spelt so that the echo of the widget's own
# definition cannot match it.
_ZSH_DRIVER = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PS1=; fpath=(${(q)1} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'typed() { zle complete-word; print -r -- "${(U):-done}[$BUFFER]"; exit; }'
zpty -w z 'zle -N typed; bindkey "^I" typed'
zpty -w -n z "$2"$'\t'
zpty -r z out '*DONE\[*\]'
print -r -- "${${out##*DONE\[}%\]*}"
zpty -d z
"""


def _zsh_complete(home: Path, line: str, installed: bool = True) -> str:
    """The command line after one Tab on ``line`` in an interactive zsh started in ``home``
    (where the script is, when ``installed``)."""
    fpath = home if installed else home / "absent"
    ran = subprocess.run(
        ["zsh", "-f", "-c", _ZSH_DRIVER, "zsh", str(fpath), line],
        cwd=home,
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.rstrip("\n")


def test_zsh_loads_the_script_and_registers_its_completion_function() -> None:
    # eval, as `eval "$(flashsale completion zsh)"` in a .zshrc after compinit: compdef names it.
    checked = subprocess.run(
        [
            "zsh",
            "-f",
            "-c",
            'autoload -Uz compinit && compinit -u -D && eval "$(cat)" && '
            "print -r -- $+functions[_shtab_flashsale] $_comps[flashsale]",
        ],
        input=script("zsh"),
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == "1 _shtab_flashsale\n"


def test_zsh_completes_commands_subcommands_and_options_from_fpath(tmp_path: Path) -> None:
    (tmp_path / "_flashsale").write_text(script("zsh"))
    assert _zsh_complete(tmp_path, "flashsale fle") == "flashsale fleet "
    assert _zsh_complete(tmp_path, "flashsale fleet st") == "flashsale fleet status "
    assert _zsh_complete(tmp_path, "flashsale sale cr") == "flashsale sale create "
    assert _zsh_complete(tmp_path, "flashsale completion z") == "flashsale completion zsh "
    assert _zsh_complete(tmp_path, "flashsale fleet up --gat") == "flashsale fleet up --gateways "
    # Without the script on $fpath zsh has nothing to offer: the completions above are its work.
    assert _zsh_complete(tmp_path, "flashsale fleet st", installed=False) == "flashsale fleet st"
