"""FLASHSALE_LOG_FORMAT=json in every process that sets its logging up (kernel.logs.setup) beside
the gateway and the writer (tests/system/test_request_id.py): the failover watch, the fleet's
supervisor and sold-out agent, the expiry job and ``reconcile --every``. Each test checks that
the process's log records reach stderr as one JSON object per line, with no stack.

Those that log before they need a server are run for real, as subprocesses whose Redis,
PostgreSQL and Kafka addresses refuse connections (ports this test holds bound but not
listening: nothing can answer there), and their stderr is parsed. The expiry job and ``reconcile
--every`` log nothing before their first connection, and a refused one ends them with the
command line's one-line error instead; so they run in this process, through the command line's
own ``main`` and handler (which call ``logs.setup`` as they do for real), on a pool and router
that refuse every call: the job's real loop then logs its start, a failed round and its stop."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flashsale.stack.processes import settings_env
from kernel.settings import PREFIX, PROJECT_ROOT, Settings
from tests.support.cli_boundary import Ran, fake_stack, run

READ_TIMEOUT_S = 30
KEYS = {"ts", "level", "logger", "pid", "msg"}  # kernel.logs.JsonFormatter's, always there


def _records(lines: list[str]) -> list[dict[str, Any]]:
    """Each line decoded as one JSON log record; any other line fails the test."""
    records = []
    for line in lines:
        try:
            record = msgspec.json.decode(line)
        except msgspec.DecodeError:
            pytest.fail(f"not a JSON record: {line!r}")
        assert isinstance(record, dict) and KEYS <= set(record), line
        records.append(record)
    return records


@pytest.fixture
def refusing() -> Iterator[list[str]]:
    """Four loopback addresses that refuse connections: bound, never listening, for the test."""
    held = []
    for _ in range(4):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    yield [f"127.0.0.1:{s.getsockname()[1]}" for s in held]
    for sock in held:
        sock.close()


def _environment(refusing: list[str]) -> dict[str, str]:
    """This environment without its FLASHSALE_* variables (so every server setting is the one
    given here, never the local stack's), JSON logs, and the stack at ``refusing``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    return {
        **kept,
        **settings_env(
            log_format="json",
            redis_nodes=tuple(refusing[:3]),
            pg_dsn=f"postgresql://flashsale@{refusing[3]}/flashsale",
            kafka_bootstrap=refusing[3],
        ),
    }


@contextmanager
def _started(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A process of this test's, ended by its PID (SIGTERM, as `fleet down` ends one) after."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=READ_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], READ_TIMEOUT_S)
    assert ready, f"nothing on stderr after {READ_TIMEOUT_S} s"
    return proc.stderr.readline().rstrip("\n")


def _stopped(proc: subprocess.Popen[str]) -> list[str]:
    """SIGTERM, then what the process wrote on stderr until it exited."""
    assert proc.stderr is not None
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    proc.wait(timeout=READ_TIMEOUT_S)
    return rest.splitlines()


def test_failover_watch_logs_json_lines(refusing: list[str]) -> None:
    """`flashsale failover-watch` (flashsale/cli/processes.py): its start-up record, and every
    line it writes until SIGTERM stops it, is one JSON record."""
    argv = [sys.executable, "-m", "flashsale", "failover-watch"]
    with _started(argv, _environment(refusing)) as proc:
        first = _first_line(proc)
        lines = [first, *_stopped(proc)]
    records = _records(lines)
    assert records[0]["level"] == "WARNING"
    assert records[0]["logger"] == "flashsale.cli.processes"
    assert records[0]["msg"].startswith("watching 3 Redis nodes: a primary refusing")


def test_the_fleet_supervisor_logs_json_lines(refusing: list[str], tmp_path: Path) -> None:
    """flashsale/fleet/supervise.py as `fleet up` runs it, over a child that exits at once: its
    record of each exit, and every line until SIGTERM stops it (exit status 0, its own
    handler), is one JSON record."""
    marker = f"json-log-child-{os.getpid()}"  # the child's command line holds it (`$0`)
    argv = [sys.executable, "-m", "flashsale.fleet.supervise", str(tmp_path), "child", marker]
    argv += ["sh", "-c", "exit 3", marker]
    with _started(argv, _environment(refusing)) as proc:
        first = _first_line(proc)
        lines = [first, *_stopped(proc)]
        assert proc.returncode == 0
    records = _records(lines)
    assert records[0]["level"] == "WARNING"
    assert records[0]["msg"].startswith("child (pid ")
    assert "exited after" in records[0]["msg"]


def test_the_sold_out_agent_logs_json_lines(refusing: list[str], tmp_path: Path) -> None:
    """flashsale/fleet/agent.py as the supervisor runs it, with no haproxy and no Redis: its
    record that the balancer is unreachable is one JSON line, and so is every line before the
    end. (That end, its shard router failing to reach Redis, is Python's traceback of the
    uncaught error, not a log record: the lines from it on are not checked.)"""
    argv = [sys.executable, "-m", "flashsale.fleet.agent"]
    argv += [str(tmp_path / "haproxy.sock"), str(tmp_path / "agent.ready")]
    with _started(argv, _environment(refusing)) as proc:
        first = _first_line(proc)
        rest = _stopped(proc)
    lines = [first, *rest]
    end = next((n for n, line in enumerate(lines) if line.startswith("Traceback")), len(lines))
    records = _records(lines[:end])
    assert records, lines
    assert records[0]["level"] == "WARNING"
    assert records[0]["msg"].startswith("balancer unreachable (")


class _Refusing:
    """A pool or router whose every call fails as an unreachable server does, after sending
    this process SIGINT: the job's own handler (kernel.periodic.stopped_by_signals) then stops
    it between rounds, so the run ends as an operator's Ctrl-C ends it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            signal.raise_signal(signal.SIGINT)
            raise ConnectionRefusedError(f"{name}: refused (the test's stand-in)")

        return refuse


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """logs.setup replaces the root logger's handlers: put this test run's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def _run_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cfg: Settings, *args: str
) -> Ran:
    """``flashsale ARGS`` in this process with JSON logs, on the refusing pool and router."""
    main = importlib.import_module("flashsale.cli.main")  # the package's `main` is the function
    json_cfg = dataclasses.replace(
        cfg, log_format="json", expiry_interval_ms=100, reconcile_metrics_port=-1
    )
    monkeypatch.setattr(main, "settings", lambda: json_cfg)
    fake_stack(monkeypatch, _Refusing(), _Refusing())
    with _root_logging_kept():
        ran = run(capsys, *args)
    assert ran.status == 0, ran.err
    assert ran.out == ""
    return ran


def test_the_expiry_job_logs_json_lines(
    cfg: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`flashsale expiry`: its handler's logs.setup makes the job's records (its start, a round
    that failed, its stop) one JSON object per line on stderr, and nothing else is written."""
    ran = _run_job(monkeypatch, capsys, cfg, "expiry")
    records = _records(ran.err.splitlines())
    assert [(r["logger"], r["level"]) for r in records] == [
        ("jobs.expiry", "INFO"),
        ("kernel.periodic", "WARNING"),
        ("jobs.expiry", "INFO"),
    ]
    assert records[0]["msg"] == "expiry: a round every 0.1 s until SIGTERM"
    assert records[1]["msg"] == "expiry round failed: fetch: refused (the test's stand-in)"
    assert records[2]["msg"] == "expiry stopped between rounds"
    assert {r["pid"] for r in records} == {os.getpid()}


def test_reconcile_every_logs_json_lines(
    cfg: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`flashsale reconcile --every`: likewise, a round that failed and the loop's stop."""
    ran = _run_job(monkeypatch, capsys, cfg, "reconcile", "--every", "0.1")
    records = _records(ran.err.splitlines())
    assert [(r["logger"], r["level"]) for r in records] == [
        ("kernel.periodic", "WARNING"),
        ("jobs.reconcile_loop", "INFO"),
    ]
    assert records[0]["msg"].startswith("reconcile round failed: ")
    assert records[0]["msg"].endswith(": refused (the test's stand-in)")
    assert records[1]["msg"] == "reconciliation stopped between rounds"
