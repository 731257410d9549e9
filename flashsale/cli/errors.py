"""The command line's errors: each knows its exit status; ``main`` prints it as one line.

CliError
├── UsageError   2  the input breaks a rule, or a dangerous step lacks --yes off a terminal
└── Failure      1  the stack refused or lacks something (not found, not ready, drift)
    └── Declined 1  the operator answered no: nothing was changed
"""

from __future__ import annotations

from typing import ClassVar


class CliError(Exception):
    exit_status: ClassVar[int] = 1


class UsageError(CliError):
    exit_status = 2


class Failure(CliError):
    exit_status = 1


class Declined(Failure):
    pass
