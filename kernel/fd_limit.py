"""Raising this process's open-files limit: the soft limit up towards the hard one. Process set-up
(the gateway's connections, a load generator's sockets); children inherit the limit."""

from __future__ import annotations

import resource


def raise_open_files_limit(needed: int | None = None) -> int:
    """Raise the soft limit to ``needed`` (None: to the hard limit), never past the hard limit
    and never lower than it is; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if needed is None else _at_most(needed, hard)
    if _below(soft, wanted):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    return soft


def _at_most(value: int, limit: int) -> int:
    return value if limit == resource.RLIM_INFINITY else min(value, limit)


def _below(soft: int, wanted: int) -> bool:
    if soft == resource.RLIM_INFINITY:
        return False
    return wanted == resource.RLIM_INFINITY or soft < wanted
