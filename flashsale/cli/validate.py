"""Input goes through the API's own wire types (msgspec); a refusal becomes one line that names
the option (or the file and field) and the rule, e.g. ``--quantity: must be at least 0``.

msgspec's messages have a fixed form (``Expected `int` >= 0 - at `$.items[0].quantity```), read
here into words; a form not known here is shown as msgspec wrote it, never as a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar, overload

import msgspec

from domain.rules import NO_NUL_PATTERN, FieldRuleError
from domain.vouchers import CODE_PATTERN
from flashsale.cli.errors import UsageError

T = TypeVar("T")

# msgspec quotes a pattern with repr(), so they are looked up that way.
_PATTERNS = {
    repr(CODE_PATTERN): "must be 1 to 64 of the characters A-Z a-z 0-9 _ -",
    repr(NO_NUL_PATTERN): "must not contain a NUL character",
}
_KINDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "object": "a JSON object",
    "array": "a JSON array",
    "null": "null",
    "datetime": "an RFC 3339 date-time",
}
_AT = re.compile(r"^(?P<text>.*?)(?: - at `(?P<path>[^`]*)`)?$", re.DOTALL)
_BOUND = {">=": "at least", "<=": "at most", ">": "greater than", "<": "less than"}
_NUMBER = re.compile(r"^Expected `(?:int|float)` (?P<op>>=|<=|>|<) (?P<n>\S+)$")
_LENGTH = re.compile(r"^Expected `(?P<kind>str|array|object)` of length (?P<op>>=|<=) (?P<n>\d+)$")
_REGEX = re.compile(r"^Expected `str` matching regex (?P<pattern>.*)$", re.DOTALL)
_TYPE = re.compile(r"^Expected `(?P<want>[^`]+)`(?: \| `null`)?, got `(?P<got>[^`]+)`$")
_FIELD = re.compile(r"^Object (?P<how>missing required|contains unknown) field `(?P<name>[^`]*)`$")


def _length(kind: str, op: str, n: int) -> str:
    if op == ">=" and n == 1:
        return "must not be empty"
    unit = "characters" if kind == "str" else "entries"
    return f"must have {_BOUND[op]} {n} {unit}"


def rule_of(text: str) -> tuple[str, str]:
    """msgspec's text (the part before `` - at``) → (field to append to the path, rule)."""
    if m := _NUMBER.match(text):
        return "", f"must be {_BOUND[m['op']]} {m['n']}"
    if m := _LENGTH.match(text):
        return "", _length(m["kind"], m["op"], int(m["n"]))
    if m := _REGEX.match(text):
        return "", _PATTERNS.get(m["pattern"], f"must match {m['pattern']}")
    if m := _TYPE.match(text):
        want, got = (_KINDS.get(k, k) for k in (m["want"], m["got"]))
        return "", f"must be {want}, not {got}"
    if m := _FIELD.match(text):
        known = m["how"] == "missing required"
        return m["name"], "is required" if known else "is not a field of this request"
    if text.startswith("Invalid RFC3339 encoded datetime"):
        return "", "must be an RFC 3339 date-time with a time zone, e.g. 2030-01-01T12:00:00Z"
    return "", text


def problem(exc: msgspec.ValidationError) -> tuple[str, str]:
    """(JSON path of the offending field, the rule it breaks), e.g. ('$.items[0].quantity',
    'must be at least 0')."""
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    path = m["path"] or "$"
    cause = exc.__cause__
    if isinstance(cause, FieldRuleError):  # a cross-field rule of domain/rules.py
        return f"{path}.{cause.field}", cause.rule
    field, rule = rule_of(m["text"])
    return (f"{path}.{field}" if field else path), rule


@overload
def convert(value: Any, kind: type[T], options: Mapping[str, str]) -> T: ...
@overload
def convert(value: Any, kind: Any, options: Mapping[str, str]) -> Any: ...
def convert(value: Any, kind: Any, options: Mapping[str, str]) -> Any:
    """``value`` (built from options, with the API's field names) as ``kind``, or UsageError
    naming the option ``options`` maps the failing field's JSON path to."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        path, rule = problem(exc)
        raise UsageError(f"{options.get(path, path)}: {rule}") from exc


def decode(data: bytes, kind: type[T], source: str) -> T:
    """A JSON request body (as the API takes it) as ``kind``, or UsageError naming ``source``
    and the field, e.g. ``--from sale.json: items[1].quantity: must be at least 0``."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        path, rule = problem(exc)
        where = path.removeprefix("$").removeprefix(".")
        raise UsageError(f"{source}: {where + ': ' if where else ''}{rule}") from exc
    except msgspec.DecodeError as exc:
        raise UsageError(f"{source}: not valid JSON: {exc}") from exc
