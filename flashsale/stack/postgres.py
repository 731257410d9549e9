"""PostgreSQL from Debian's packages in a data directory of the project's own, on its own port.

``initdb`` refuses to run as root, so when the stack is started by root the server runs as the
``postgres`` system user (created by Debian's package) and owns only the project's data directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
from pathlib import Path
from urllib.parse import urlparse

from flashsale.stack.processes import Managed, StackError, run, wait_until
from kernel.settings import Settings


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not candidates:
        raise StackError(f"{name} not found (scripts/bootstrap installs PostgreSQL)")
    return str(candidates[-1])


class Postgres:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.data = cfg.pg_data_dir
        self.socket_dir = cfg.state_dir / "pg-socket"
        self.proc = Managed("postgres", cfg.state_dir)
        dsn = urlparse(cfg.pg_dsn)
        self.superuser = dsn.username or "flashsale"
        self.database = (dsn.path or "/flashsale").lstrip("/")
        self.run_as = "postgres" if os.geteuid() == 0 else None

    def _own(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)
            path.chmod(0o700)

    def up(self) -> None:
        if self.proc.pid() is None:
            self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
            self._own(self.socket_dir)
            if not (self.data / "PG_VERSION").exists():
                self._own(self.data)
                run(
                    [
                        _pg_bin("initdb"),
                        "-D",
                        str(self.data),
                        "-U",
                        self.superuser,
                        "--auth=trust",
                        "-E",
                        "UTF8",
                        "--no-instructions",
                    ],
                    user=self.run_as,
                )
            self.proc.start(
                [
                    _pg_bin("postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.cfg.pg_port),
                    "-k",
                    str(self.socket_dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "max_connections=200",
                ],
                marker=str(self.data),
                user=self.run_as,
            )
        if not wait_until(self._accepting, 60, interval=0.2):
            raise StackError(f"PostgreSQL did not start; see {self.proc.log_file}")
        self._create_database()

    def _psql(self, sql: str, database: str = "postgres") -> str:
        return run(
            [
                _pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.cfg.pg_port),
                "-U",
                self.superuser,
                "-d",
                database,
                "-tAc",
                sql,
            ],
            timeout=30,
        ).stdout

    def _accepting(self) -> bool:
        return self._psql("select 1").strip() == "1"

    def _create_database(self) -> None:
        exists = self._psql(f"select 1 from pg_database where datname = '{self.database}'")
        if exists.strip() != "1":
            self._psql(f'create database "{self.database}"')

    def down(self) -> bool:
        # SIGINT is PostgreSQL's "fast" shutdown: roll back sessions, checkpoint, exit.
        return self.proc.stop(signal.SIGINT, timeout=60)

    def processes(self) -> list[Managed]:
        return [self.proc]

    def status(self) -> str:
        pid = self.proc.pid()
        return f"pid {pid}, 127.0.0.1:{self.cfg.pg_port} db {self.database}" if pid else "stopped"
