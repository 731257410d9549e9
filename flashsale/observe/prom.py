"""A small client of Prometheus's HTTP API (instant and range queries, the alerts), standard
library only: the console and the report need three calls, not a dependency."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 2.0
# Prometheus is asked directly: a proxy from the environment must not answer for it.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Labels = dict[str, str]


class PrometheusUnavailable(RuntimeError):
    """Prometheus did not answer, or answered an error."""


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    state: str  # firing, pending
    labels: Labels
    summary: str


@dataclass(frozen=True, slots=True)
class Prometheus:
    url: str  # e.g. http://127.0.0.1:19090

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with _direct.open(f"{self.url}{path}?{query}", timeout=TIMEOUT_S) as answer:
                body = json.load(answer)
        except (OSError, ValueError) as exc:  # refused, timed out, an error status, not JSON
            raise PrometheusUnavailable(f"{self.url}: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusUnavailable(f"{self.url}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list[tuple[Labels, float]]:
        """An instant vector: (labels, value) per series."""
        data = self._get("/api/v1/query", query=expr)
        return [(r["metric"], float(r["value"][1])) for r in data.get("result", [])]

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """A range: (labels, [(unix time, value), ...]) per series."""
        data = self._get(
            "/api/v1/query_range", query=expr, start=str(start), end=str(end), step=str(step)
        )
        return [
            (r["metric"], [(float(t), float(v)) for t, v in r["values"]])
            for r in data.get("result", [])
        ]

    def alerts(self) -> list[Alert]:
        return [
            Alert(
                a["labels"].get("alertname", "?"),
                a.get("state", "?"),
                a["labels"],
                a.get("annotations", {}).get("summary", ""),
            )
            for a in self._get("/api/v1/alerts").get("alerts", [])
        ]
