"""A writer whose metrics port is taken says which port and which setting, and exits 1 before it
reaches anything else (it is not "the stack" that cannot be reached)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from flashsale.stack.processes import settings_env
from kernel.settings import PROJECT_ROOT

TIMEOUT_S = 60


def test_a_taken_metrics_port_is_named_with_its_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, **settings_env(writer_metrics_port=port, metrics_host="127.0.0.1")}
        done = subprocess.run(
            [sys.executable, "-m", "flashsale", "writer"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert f"127.0.0.1:{port}" in said, said
    assert "FLASHSALE_WRITER_METRICS_PORT" in said, said
    assert "cannot reach the stack" not in said, said
