"""Apply migrations/*.sql in order with yoyo-migrations, which records what was applied."""

from __future__ import annotations

from yoyo import get_backend, read_migrations

from kernel.resources import asset
from kernel.settings import Settings

MIGRATIONS_DIR = asset("migrations")


def _yoyo_url(dsn: str) -> str:
    # yoyo picks the driver from the URL scheme; psycopg 3 is the maintained one.
    return "postgresql+psycopg://" + dsn.split("://", 1)[1]


def migrate(cfg: Settings) -> list[str]:
    """Apply pending migrations under yoyo's lock (two runs at once apply each once)."""
    backend = get_backend(_yoyo_url(cfg.pg_dsn))
    migrations = read_migrations(str(MIGRATIONS_DIR))
    try:
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
    finally:
        backend.connection.close()
    return [m.id for m in pending]


def pending(cfg: Settings) -> list[str]:
    """What ``migrate`` would apply now, applying nothing."""
    backend = get_backend(_yoyo_url(cfg.pg_dsn))
    try:
        return [m.id for m in backend.to_apply(read_migrations(str(MIGRATIONS_DIR)))]
    finally:
        backend.connection.close()
