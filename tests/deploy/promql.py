"""The metric names a PromQL expression reads, with the recording rules it names expanded into
the metrics they read, and the names a /metrics page exports. No tests here."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORDS = re.compile(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    "by without on ignoring group_left group_right and or unless bool offset inf nan".split()
)
# Series Prometheus makes itself, not a process.
SYNTHETIC = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})


def names_in(expr: str) -> set[str]:
    """The series names ``expr`` selects (functions, keywords, labels and literals left out)."""
    for pattern in (_STRINGS, _MATCHERS, _RANGES, _LABEL_LISTS):
        expr = pattern.sub(" ", expr)
    found = set()
    for word in _WORDS.finditer(expr):
        if expr[word.end() :].lstrip().startswith("(") or word.group() in _KEYWORDS:
            continue  # a function or an aggregation, or an operator
        found.add(word.group())
    return found


def recording_rules(paths: Iterable[Path]) -> dict[str, str]:
    """Recorded name → its expression."""
    rules = {}
    for path in paths:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.update({r["record"]: r["expr"] for r in group["rules"] if "record" in r})
    return rules


def metrics_read(expr: str, rules: Mapping[str, str]) -> set[str]:
    """The exported metrics ``expr`` reads, through any recording rules it names."""
    found: set[str] = set()
    for name in names_in(expr):
        found |= metrics_read(rules[name], rules) if name in rules else {name}
    return found


def exported(text: str) -> set[str]:
    """Every series name a /metrics page has samples of or declares (a labelled family with no
    child yet, or a collector with nothing to report now, has only its # TYPE line)."""
    names = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names
