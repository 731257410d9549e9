"""A small sale with every process that exports metrics beside it: a gateway, a writer and a
continuous reconciliation of the sale's item, each with /metrics on a port of its own; buyers to
make it move; and a Prometheus of the test's own scraping them. For the dashboard's test and
``flashsale watch``'s and ``report``'s. No tests here."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from flashsale.observe.prom import Prometheus as PrometheusApi
from flashsale.stack import processes
from flashsale.stack.processes import (
    http_ready,
    process_group,
    settings_env,
    wait_ready,
    wait_until,
)
from flashsale.stack.prometheus import Prometheus
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS
from tests.support.gateway import new_sale, running_gateway

READY_TIMEOUT_S = 30.0
_buyers = itertools.count(uuid.uuid4().int % 10**9 * 10**5 + 7 * 10**14)


@dataclass(frozen=True, slots=True)
class ObservedSale:
    base: str  # the gateway's base URL
    sale_id: int
    item_id: int
    quantity: int
    gateway: str  # host:port of each process's /metrics
    writer: str
    jobs: str

    def settings(self, cfg: Settings) -> Settings:
        """``cfg`` with these processes as the scrape targets (what watch and Prometheus read)."""
        return dataclasses.replace(
            cfg,
            gateway_targets=(self.gateway,),
            writer_targets=(self.writer,),
            job_targets=(self.jobs,),
        )


@contextmanager
def observed_sale(
    cfg: Settings, gateway_port: int, quantity: int, shards: int
) -> Iterator[ObservedSale]:
    """The processes, and an armed sale of one item of ``quantity`` units over ``shards``."""
    writer, jobs = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = settings_env(
        writer_metrics_port=int(writer.rsplit(":", 1)[1]),
        reconcile_metrics_port=int(jobs.rsplit(":", 1)[1]),
        **LIFTED_IP_LIMITS,
    )
    with ExitStack() as running:
        base = running.enter_context(running_gateway(cfg, gateway_port, **env))
        writer_proc = running.enter_context(
            process_group([sys.executable, "-m", "writer"], env=env)
        )
        wait_ready(writer_proc, http_ready(f"http://{writer}/metrics"), READY_TIMEOUT_S, "writer")
        sale = new_sale(base, quantity=quantity, shards=shards)
        item_id: int = sale["items"][0]["itemId"]
        reconcile = [sys.executable, "-m", "flashsale", "reconcile", "--every", "1"]
        job = running.enter_context(process_group([*reconcile, "--item", str(item_id)], env=env))
        wait_ready(job, http_ready(f"http://{jobs}/metrics"), READY_TIMEOUT_S, "reconcile")
        yield ObservedSale(
            base, sale["saleId"], item_id, quantity, f"127.0.0.1:{gateway_port}", writer, jobs
        )


def buy(cfg: Settings, sale: ObservedSale, buyers: int, pause_s: float = 0.0) -> Counter[int]:
    """``buyers`` distinct buyers press Buy one after the other; the answers' statuses."""
    statuses: Counter[int] = Counter()
    with httpx.Client(base_url=sale.base, timeout=10) as client:
        for _ in range(buyers):
            token = sign_token(cfg, next(_buyers))
            answer = client.post(
                f"/api/flash-sales/items/{sale.item_id}/purchase",
                headers={"Authorization": f"Bearer {token}"},
            )
            statuses[answer.status_code] += 1
            time.sleep(pause_s)
    return statuses


def scrape(address: str, path: str = "/metrics") -> str:
    return httpx.get(f"http://{address}{path}", timeout=10).text


@contextmanager
def own_prometheus(cfg: Settings, home: Path) -> Iterator[Settings]:
    """A Prometheus (and redis_exporter) under ``home`` on free ports, scraping ``cfg``'s targets
    every second with the repository's rules, once it has scraped every process twice (rates
    have their two points); the settings that point at it. The stack's own scrapes the stack's
    ports, not a test's."""
    port = free_port()
    cfg = dataclasses.replace(
        cfg,
        state_dir=home,
        prometheus_port=port,
        prometheus_url=f"http://127.0.0.1:{port}",
        redis_exporter_port=free_port(),
        scrape_interval_s=1,
    )
    server = Prometheus(cfg)
    server.up()
    try:
        api = PrometheusApi(cfg.prometheus_url)

        def scraped() -> bool:
            found = api.query("count_over_time(up[1m]) >= 2 and up == 1")
            return {m["job"] for m, _ in found} >= {"gateway", "writer", "jobs"}

        assert wait_until(scraped, 30, interval=0.5), "Prometheus did not scrape the processes"
        yield cfg
    finally:
        server.down()
        for proc in processes._started:  # reap them: stack servers outlive their starter
            proc.poll()
