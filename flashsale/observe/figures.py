"""The figures the console shows beside the sale's state: answers per second by outcome, p50 and
p99 of the reservation and of each route, the writers' lag, reconciliation's findings, the
alerts. From Prometheus's recording rules when it answers; else read straight from the
processes' /metrics pages (the settings' targets), rates from two readings a tick apart."""

from __future__ import annotations

import math
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from flashsale.observe.prom import Alert, Prometheus, PrometheusUnavailable
from kernel.settings import Settings

Quantiles = tuple[float | None, float | None]  # p50, p99 in seconds; None: no request
FINDINGS = ("drift_units", "lost_units", "ghost_holds", "stale_holds", "failed_orders")
SCRAPE_TIMEOUT_S = 2.0
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Figures:
    source: str  # where they come from, shown in the console's header
    answers: dict[str, float] = field(default_factory=dict)  # outcome -> per second
    reservation: Quantiles = (None, None)
    routes: dict[str, Quantiles] = field(default_factory=dict)
    writer_lag: dict[str, float] = field(default_factory=dict)  # topic -> messages
    findings: dict[str, dict[str, float]] = field(default_factory=dict)  # item -> name -> n
    alerts: list[Alert] | None = None  # None: unknown (Prometheus did not answer)
    missing: list[str] = field(default_factory=list)  # targets that did not answer


def _number(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def from_prometheus(prom: Prometheus, item_ids: Iterable[int]) -> Figures:
    """The recording rules of deploy/prometheus/rules/recording.yml, and the alerts."""
    figures = Figures(f"Prometheus {prom.url}")
    figures.answers = {
        m.get("outcome", "?"): v for m, v in prom.query("flashsale:purchase_answers:rate10s")
    }
    p50 = prom.query("flashsale:reservation_seconds:p50")
    p99 = prom.query("flashsale:reservation_seconds:p99")
    figures.reservation = (
        _number(p50[0][1]) if p50 else None,
        _number(p99[0][1]) if p99 else None,
    )
    routes: dict[str, list[float | None]] = defaultdict(lambda: [None, None])
    for i, rule in enumerate(("p50", "p99")):
        for labels, value in prom.query(f"flashsale:http_request_seconds:{rule}"):
            routes[labels.get("route", "?")][i] = _number(value)
    figures.routes = {route: (q[0], q[1]) for route, q in routes.items()}
    figures.writer_lag = {
        m.get("topic", "?"): v for m, v in prom.query("flashsale:writer_lag:messages")
    }
    wanted = "|".join(str(i) for i in item_ids) or "none"
    for name in FINDINGS:
        for labels, value in prom.query(f'flashsale_reconcile_{name}{{item=~"{wanted}"}}'):
            figures.findings.setdefault(labels["item"], {})[name] = value
    figures.alerts = [a for a in prom.alerts() if a.state == "firing"]
    return figures


Key = tuple[str, tuple[tuple[str, str], ...]]  # a series: its name and sorted labels


def scrape(address: str) -> dict[Key, float]:
    with _direct.open(f"http://{address}/metrics", timeout=SCRAPE_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's interpolation within the bucket the rank falls in: ``buckets`` maps each
    upper bound (inf included) to its cumulative count."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # the highest finite bound, as Prometheus answers
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return None


class Scraper:
    """The processes' pages, read every tick; rates between this reading and the last."""

    def __init__(self, cfg: Settings) -> None:
        self.jobs = {
            "gateway": cfg.gateway_targets,
            "writer": cfg.writer_targets,
            "jobs": cfg.job_targets,
        }
        self._last: tuple[float, dict[Key, float]] | None = None

    def read(self) -> Figures:
        figures = Figures("the processes' /metrics (Prometheus did not answer)")
        now: dict[str, dict[Key, float]] = {job: {} for job in self.jobs}
        for job, targets in self.jobs.items():
            for address in targets:
                try:
                    page = scrape(address)
                except OSError:
                    figures.missing.append(address)
                    continue
                for key, value in page.items():
                    now[job][key] = now[job].get(key, 0.0) + value  # summed over the targets
        gateways = now["gateway"]
        at = time.monotonic()
        last, self._last = self._last, (at, gateways)
        if last is not None:
            _rates(figures, gateways, last[1], at - last[0])
        for (name, labels), value in now["writer"].items():
            if name == "flashsale_writer_consumer_lag":
                topic = dict(labels).get("topic", "?")
                figures.writer_lag[topic] = figures.writer_lag.get(topic, 0.0) + value
        for (name, labels), value in now["jobs"].items():
            finding = name.removeprefix("flashsale_reconcile_")
            item = dict(labels).get("item", "")
            if finding in FINDINGS and item:
                figures.findings.setdefault(item, {})[finding] = value
        return figures


def _rates(figures: Figures, now: dict[Key, float], last: dict[Key, float], dt: float) -> None:
    def delta(key: Key) -> float:
        moved = now[key] - last.get(key, 0.0)
        return now[key] if moved < 0 else moved  # a restarted process counts from zero

    reservation: dict[float, float] = {}
    routes: dict[str, dict[float, float]] = defaultdict(dict)
    for key in now:
        name, labels = key
        label = dict(labels)
        if name == "flashsale_purchase_requests_total":
            figures.answers[label["outcome"]] = delta(key) / max(dt, 1e-3)
        elif name == "flashsale_reservation_seconds_bucket":
            reservation[float(label["le"])] = delta(key)
        elif name == "flashsale_http_request_seconds_bucket":
            routes[label["route"]][float(label["le"])] = delta(key)
    figures.reservation = (
        histogram_quantile(0.5, reservation),
        histogram_quantile(0.99, reservation),
    )
    figures.routes = {
        route: (histogram_quantile(0.5, b), histogram_quantile(0.99, b))
        for route, b in routes.items()
    }


def figures_now(cfg: Settings, scraper: Scraper, item_ids: Iterable[int]) -> Figures:
    """From Prometheus if it answers, else from the pages (rates from their second reading)."""
    try:
        return from_prometheus(Prometheus(cfg.prometheus_url), item_ids)
    except PrometheusUnavailable:
        return scraper.read()
