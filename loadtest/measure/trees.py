"""Code trees to compare side by side: ``NAME=WHERE[,field=value...]``, WHERE a directory (a copy
of the project) or a git revision of this checkout, exported read-only; the fields are Settings
fields given to that tree's gateway."""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from kernel.settings import PROJECT_ROOT


@dataclass(frozen=True, slots=True)
class Tree:
    name: str
    root: Path
    settings: tuple[tuple[str, str], ...] = ()  # Settings fields given to its gateway


@dataclass(frozen=True, slots=True)
class Wanted:
    name: str
    where: str  # a directory or a git revision
    settings: tuple[tuple[str, str], ...] = ()


CURRENT = Tree("current", PROJECT_ROOT)


def parse(text: str) -> Wanted:
    """``NAME=WHERE`` or ``NAME=WHERE,field=value,...``."""
    name, sep, rest = text.partition("=")
    where, *fields = rest.split(",")
    pairs = tuple(tuple(f.split("=", 1)) for f in fields)
    if not sep or not name or not where or any(len(p) != 2 for p in pairs):
        raise ValueError(f"NAME=DIR|REV[,field=value...]: {text!r}")
    return Wanted(name, where, pairs)  # type: ignore[arg-type]


def check_out(wanted: Wanted, workdir: Path) -> Tree:
    """The tree: the directory as it is, or the revision exported into ``workdir/NAME`` (with
    ``git archive``: this checkout's branch, index and work tree are left alone)."""
    if Path(wanted.where).is_dir():
        return Tree(wanted.name, Path(wanted.where).resolve(), wanted.settings)
    done = subprocess.run(
        ["git", "archive", "--format=tar", wanted.where],  # noqa: S607 - git on PATH
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"{wanted.where!r} is neither a directory nor a revision: {done.stderr!r}")
    root = workdir / wanted.name
    root.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(root, filter="data")
    return Tree(wanted.name, root, wanted.settings)
