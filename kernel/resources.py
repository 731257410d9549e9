"""The files the code reads that are not Python: the Lua scripts, the SQL migrations, the deploy
templates (and any package's own data files). One place decides where they are.

A source checkout keeps ``lua/``, ``migrations/`` and ``deploy/`` at its top (the project's
layout); a wheel ships them as package data of ``kernel``, under ``kernel/assets/`` (the
packaging table of pyproject.toml maps them there), so nothing with a generic name like
``migrations`` lands in site-packages; there they are found with ``importlib.resources``.

Callers get ``pathlib.Path`` objects: yoyo, Maven and Prometheus are handed directories and
files by name, so the package must be installed unzipped (pip always installs a wheel so).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

Asset = Literal["lua", "migrations", "deploy"]

_KERNEL = Path(__file__).resolve().parent
# The checkout's root, when this file is run from one (pyproject.toml beside kernel/).
CHECKOUT: Path | None = _KERNEL.parent if (_KERNEL.parent / "pyproject.toml").is_file() else None


def package_file(package: str, *parts: str) -> Path:
    """``parts`` under ``package``'s directory, as installed (data shipped with the package)."""
    found = importlib.resources.files(package).joinpath(*parts)
    if not isinstance(found, Path):  # a zip import: no path to hand to another program
        raise RuntimeError(f"{package} is not installed as files; reinstall it from the wheel")
    return found


def asset(kind: Asset, *parts: str) -> Path:
    """``parts`` under ``lua/``, ``migrations/`` or ``deploy/``: the checkout's own, else the
    copy the wheel installed under ``kernel/assets/``."""
    if CHECKOUT is not None:
        return CHECKOUT.joinpath(kind, *parts)
    return package_file("kernel", "assets", kind, *parts)


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """Where the local stack keeps data, logs and PID files unless FLASHSALE_STATE_DIR says:
    ``.stack`` in a checkout, else ``$XDG_STATE_HOME/flashsale`` (``~/.local/state/flashsale``)
    — never inside site-packages."""
    if CHECKOUT is not None:
        return CHECKOUT / ".stack"
    xdg = environ.get("XDG_STATE_HOME", "")
    # The XDG spec: a relative value is invalid and is ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "flashsale"
