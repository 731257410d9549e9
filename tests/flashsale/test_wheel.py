"""The package as a user installs it: a wheel built from the tree, installed (not editable) into
a scratch virtualenv, run from a directory outside the checkout. The CLI answers, and a gateway
started from the installed package sells one unit on the local stack.

The scratch environment has no pip and no dependencies of its own: a .pth file appends this
virtualenv's site-packages for the third-party libraries. A .pth file's directory is only
appended (its own .pth files, among them the editable install's, are not run), so the
project's own modules can come from nowhere but the wheel; the test checks that they do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flashsale.stack.processes import http_ready, process_group, wait_ready
from gateway.auth import sign_token
from gateway.paths import purchase_path
from kernel.settings import PROJECT_ROOT, Settings
from rig.admin import NewItem, new_sale
from rig.ports import free_port

STEP_TIMEOUT_S = 60
READY_TIMEOUT_S = 30
# Never part of a wheel: copying them would only slow the build down.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".stack*", "build", "*.egg-info", "__pycache__", ".*cache", "reports"
)
# What the installed interpreter reports about itself: where the project's code, Lua scripts,
# migrations and state directory come from.
_PROVENANCE = """
import json, kernel, gateway.app
from kernel import resources
from kernel.settings import settings
from flashsale.migrate import MIGRATIONS_DIR
from shard_router.scripts import LUA_DIR
print(json.dumps({
    "kernel": kernel.__file__, "gateway": gateway.app.__file__,
    "checkout": str(resources.CHECKOUT), "state_dir": str(settings().state_dir),
    "lua": sorted(p.name for p in LUA_DIR.glob("*.lua")),
    "migrations": sorted(p.name for p in MIGRATIONS_DIR.glob("*.sql")),
    "haproxy": resources.asset("deploy", "haproxy", "haproxy.cfg.tmpl").is_file(),
}))
"""


@dataclass(frozen=True)
class Installed:
    python: Path
    flashsale: Path
    prefix: Path
    env: dict[str, str]
    cwd: Path

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(a) for a in argv],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.cwd,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done


def _build_and_install(tmp: Path) -> Installed:
    source, dist, venv = tmp / "source", tmp / "dist", tmp / "venv"
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    shutil.copytree(PROJECT_ROOT, source, ignore=_NOT_SOURCE, symlinks=True)
    builder = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*builder, "--no-index", "-q", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=STEP_TIMEOUT_S,
    )
    [wheel] = dist.glob("flashsale_gateway-*.whl")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=STEP_TIMEOUT_S,
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    ).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    # Not FLASHSALE_STATE_DIR either (a second xdist worker's stack sets it): the installed
    # package must find its default one.
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "FLASHSALE_STATE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env |= {"FLASHSALE_ENV": "local", "XDG_STATE_HOME": str(tmp / "state")}
    installed = Installed(python, venv / "bin" / "flashsale", venv, env, cwd)
    installed.run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel)
    return installed


def test_the_wheel_installs_and_sells(live_stack: Settings, tmp_path: Path) -> None:
    cfg = live_stack
    installed = _build_and_install(tmp_path)

    found: dict[str, Any] = json.loads(installed.run(installed.python, "-c", _PROVENANCE).stdout)
    for module in ("kernel", "gateway"):
        assert Path(found[module]).is_relative_to(installed.prefix), found
    assert found["checkout"] == "None"
    assert found["state_dir"] == str(tmp_path / "state" / "flashsale")
    assert found["lua"] == sorted(p.name for p in (PROJECT_ROOT / "lua").glob("*.lua"))
    assert found["migrations"] == sorted(
        p.name for p in (PROJECT_ROOT / "migrations").glob("*.sql")
    )
    assert found["haproxy"] is True

    version = installed.run(installed.flashsale, "--version").stdout.strip()
    assert version == "flashsale 0.1.0"

    port = free_port()
    base = f"http://{cfg.gateway_host}:{port}"
    gateway_env = {**installed.env, "FLASHSALE_GATEWAY_PORT": str(port)}
    log = tmp_path / "gateway.log"
    argv = [str(installed.python), "-m", "gateway"]
    with process_group(argv, env=gateway_env, cwd=installed.cwd, log=log) as proc:
        wait_ready(proc, http_ready(f"{base}/readyz"), READY_TIMEOUT_S, "gateway", log)
        item = NewItem("wheel", quantity=3, shards=1)
        sale = new_sale(base, cfg, [item], opens_at=time.time() - 5, name="wheel")
        item_id = sale["items"][0]["itemId"]

        shown = json.loads(installed.run(installed.flashsale, "item", item_id, "--json").stdout)
        assert (shown["itemId"], shown["quantity"], shown["unitsLeft"]) == (item_id, 3, 3)

        token = sign_token(cfg, 7_000_000_001)
        answer = httpx.post(
            base + purchase_path(item_id),
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text
        assert proc.poll() is None


pytestmark = pytest.mark.slow
