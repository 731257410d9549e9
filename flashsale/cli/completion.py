"""``flashsale completion bash|zsh``: the shell's completion script, printed.

shtab writes it from the argparse parser itself (build_parser), so every command, subcommand
and option is completed the moment it is added, with nothing kept in step by hand; it runs only
when the script is asked for, never while completing (the shell's own functions do that)."""

from __future__ import annotations

import argparse
import sys

from flashsale.cli.parser import Subcommands, command
from kernel.settings import Settings

SHELLS = ("bash", "zsh")


def script(shell: str) -> str:
    import shtab

    from flashsale.cli.main import build_parser  # main builds the parser from every command

    text: str = shtab.complete(build_parser(), shell=shell)
    return text


def _completion(args: argparse.Namespace, cfg: Settings) -> int:
    sys.stdout.write(script(args.shell))
    return 0


def add_completion(sub: Subcommands) -> None:
    p = command(
        sub,
        "completion",
        "print the shell completion script: `source <(flashsale completion bash)`, or for zsh "
        "save it as _flashsale in a directory on $fpath",
        _completion,
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")
