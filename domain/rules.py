"""Rules the admin wire types share (sales, vouchers): one definition each, so the HTTP API and
the CLI refuse the same input for the same reason. Each mirrors a CHECK of migrations/, which
stays the last guard; a rule here turns what would be a database error (a 500) into a 400."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import msgspec

BIGINT_MAX = 2**63 - 1
# PostgreSQL text cannot hold NUL. ``\Z``, not ``$``: msgspec searches with Python's re, where
# ``$`` also matches before a final newline, which the database's CHECKs do not accept.
NO_NUL_PATTERN = r"^[^\x00]*\Z"

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=NO_NUL_PATTERN)]
RowId = Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)]  # a bigserial id
Money = Annotated[int, msgspec.Meta(ge=0, le=BIGINT_MAX)]  # minor currency units, a bigint


class FieldRuleError(ValueError):
    """A rule over several fields, which msgspec's per-field constraints cannot state.

    A ValueError because msgspec turns a ValueError raised in ``__post_init__`` into its
    ValidationError (so the API answers 400 INVALID_REQUEST) and keeps it as ``__cause__``: the
    CLI reads ``field`` (the wire name) and ``rule`` from there to name the offending option.
    """

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field} {rule}")
        self.field = field
        self.rule = rule


def check_window(starts_at: dt.datetime, ends_at: dt.datetime) -> None:
    """A sale's or a voucher's window: both ends with a time zone and within years 1-9999 in
    UTC, the end after the start."""
    for field, moment in (("startsAt", starts_at), ("endsAt", ends_at)):
        if moment.tzinfo is None:
            raise FieldRuleError(field, "needs a time zone")
        try:
            # The driver sends UTC: an offset that crosses year 1 or 9999 cannot be stored.
            moment.astimezone(dt.UTC)
        except OverflowError:
            raise FieldRuleError(field, "is out of range once in UTC") from None
    if ends_at <= starts_at:
        raise FieldRuleError("endsAt", "must be after startsAt")
