"""Prometheus from Debian's package, scraping the local stack's processes, and Debian's
redis_exporter beside it for the Redis nodes' replication (the in-sync replica alert).

The configuration is deploy/prometheus/prometheus.yml with the settings filled in, written under
``<state>/prometheus/`` with the data; the rules are read from the repository, so an edited rule
takes effect on the next ``stack up`` (which reloads a running Prometheus with SIGHUP, never a
restart). Targets are file_sd files written from the settings; Prometheus re-reads them itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import string
import urllib.request
from pathlib import Path

from flashsale.stack.processes import Managed, StackError, http_ready, port_open, wait_until
from kernel.resources import asset
from kernel.settings import Settings

DEPLOY = asset("deploy", "prometheus")
READY_TIMEOUT_S = 60.0
# Scraped processes, by job: (the settings field listing their /metrics addresses).
JOBS = {"gateway": "gateway_targets", "writer": "writer_targets", "jobs": "job_targets"}

_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StackError(f"{name} is missing (scripts/bootstrap installs it from Debian)")
    return found


def render_config(cfg: Settings, home: Path) -> str:
    """deploy/prometheus/prometheus.yml with this stack's addresses and paths."""
    template = string.Template((DEPLOY / "prometheus.yml").read_text())
    interval = f"{cfg.scrape_interval_s}s"
    return template.substitute(
        scrape_interval=interval,
        scrape_timeout=interval,
        health_scrape_interval=f"{cfg.health_scrape_interval_s}s",
        rules_dir=DEPLOY / "rules",
        targets_dir=home / "targets",
        redis_exporter=f"127.0.0.1:{cfg.redis_exporter_port}",
        prometheus=f"127.0.0.1:{cfg.prometheus_port}",
    )


def target_files(cfg: Settings) -> dict[str, list[dict[str, list[str]]]]:
    """The file_sd documents, by file stem: one target group per job."""
    files = {job: [{"targets": list(getattr(cfg, field))}] for job, field in JOBS.items()}
    files["redis"] = [{"targets": list(cfg.redis_nodes)}]
    return files


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # whole, never half-written: Prometheus may read it any moment
    return True


class Prometheus:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.home = cfg.state_dir / "prometheus"
        self.config = self.home / "prometheus.yml"
        self.server = Managed("prometheus", cfg.state_dir)
        self.exporter = Managed("redis-exporter", cfg.state_dir)
        self.url = f"http://127.0.0.1:{cfg.prometheus_port}"

    def processes(self) -> list[Managed]:
        return [self.server, self.exporter]

    def write_files(self) -> bool:
        """The configuration and the target files; True when the configuration changed."""
        for stem, groups in target_files(self.cfg).items():
            _write_if_changed(self.home / "targets" / f"{stem}.json", json.dumps(groups, indent=2))
        return _write_if_changed(self.config, render_config(self.cfg, self.home))

    def up(self) -> None:
        changed = self.write_files()
        exporter_at = f"127.0.0.1:{self.cfg.redis_exporter_port}"
        if self.exporter.pid() is None:
            self.exporter.start(
                [
                    _binary("prometheus-redis-exporter"),
                    "-web.listen-address",
                    exporter_at,
                    "-redis.addr",
                    "",  # no default node: every node is asked for by /scrape?target=
                    "-redis-only-metrics",
                ],
                marker=exporter_at,
            )
        pid = self.server.pid()
        if pid is None:
            (self.home / "data").mkdir(parents=True, exist_ok=True)
            self.server.start(
                [
                    _binary("prometheus"),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.home / 'data'}",
                    # A local stack's history: a few days of demos, never a full disk.
                    "--storage.tsdb.retention.time=3d",
                    "--storage.tsdb.retention.size=1GB",
                    f"--web.listen-address=127.0.0.1:{self.cfg.prometheus_port}",
                ],
                marker=str(self.config),
            )
        elif changed:
            os.kill(pid, signal.SIGHUP)  # reload the configuration, keep the data
        if not wait_until(http_ready(f"{self.url}/-/ready"), READY_TIMEOUT_S, interval=0.2):
            raise StackError(f"Prometheus did not become ready; see {self.server.log_file}")
        if not wait_until(lambda: port_open(exporter_at), 10):
            raise StackError(f"redis_exporter did not start; see {self.exporter.log_file}")

    def down(self) -> bool:
        exporter = self.exporter.stop()
        return self.server.stop() or exporter

    def status(self) -> str:
        pid = self.server.pid()
        if pid is None:
            return "stopped"
        try:
            with _direct.open(f"{self.url}/api/v1/targets?state=active", timeout=2) as answer:
                targets = json.load(answer)["data"]["activeTargets"]
        except (OSError, ValueError, KeyError):
            return f"pid {pid}, {self.url} (targets unknown)"
        up = sum(1 for t in targets if t.get("health") == "up")
        return f"pid {pid}, {self.url}, {up}/{len(targets)} targets up"
