"""pyproject.toml lists its packages by hand (so that lua/, migrations/ and deploy/ can install
under kernel/assets/): a code directory left off the list would be missing from the wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kernel import resources
from kernel.settings import PROJECT_ROOT

SKIPPED = {".venv", ".git", ".stack", "build", "tests", "scripts", "__pycache__"}


def _setuptools() -> dict[str, dict[str, object]]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    config: dict[str, dict[str, object]] = project["tool"]["setuptools"]
    return config


def _code_packages() -> set[str]:
    """Every directory of the tree that holds Python modules, as a dotted name."""
    found = set()
    for module in PROJECT_ROOT.rglob("*.py"):
        parts = module.relative_to(PROJECT_ROOT).parent.parts
        if parts and not SKIPPED & set(parts) and not parts[0].startswith("."):
            found.add(".".join(parts))
    return found


def test_every_code_directory_is_packaged() -> None:
    listed = set(_setuptools()["packages"])
    assert _code_packages() <= listed, sorted(_code_packages() - listed)


def test_assets_are_mapped_from_the_top_of_the_checkout() -> None:
    mapped = _setuptools()["package-dir"]
    for kind in ("lua", "migrations", "deploy"):
        assert mapped[f"kernel.assets.{kind}"] == kind
        assert resources.asset(kind) == PROJECT_ROOT / kind  # a checkout reads its own


def test_state_dir_outside_a_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resources.default_state_dir({}) == PROJECT_ROOT / ".stack"
    monkeypatch.setattr(resources, "CHECKOUT", None)
    assert resources.default_state_dir({"XDG_STATE_HOME": "/srv/state"}) == Path(
        "/srv/state/flashsale"
    )
    home = Path.home() / ".local" / "state" / "flashsale"
    assert resources.default_state_dir({}) == home
    assert resources.default_state_dir({"XDG_STATE_HOME": "relative"}) == home  # invalid: unset
