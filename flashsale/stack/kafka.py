"""A single Apache Kafka broker in KRaft mode (combined broker + controller) on loopback.

The jars come from Maven Central through ``stack/kafka/pom.xml`` into a cache directory outside
the repository. Storage is formatted once; the health check creates and lists a topic.
"""

from __future__ import annotations

import base64
import re
import shutil
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from flashsale.stack.processes import Managed, StackError, port_open, run, wait_until
from kernel.settings import Settings

POM = Path(__file__).parent / "kafka" / "pom.xml"
LOG4J = Path(__file__).parent / "kafka" / "log4j2.properties"
HEALTH_TOPIC = "flashsale.healthcheck"


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if match is None:
        raise StackError(f"no kafka.version in {POM}")
    return match.group(1)


def libs_dir(cfg: Settings) -> Path:
    return cfg.cache_dir / f"kafka-{kafka_version()}" / "libs"


def ensure_jars(cfg: Settings) -> Path:
    """Resolve the broker's jars with Maven once; later calls find them in the cache."""
    libs = libs_dir(cfg)
    done = libs / ".complete"
    if done.exists():
        return libs
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise StackError("Kafka needs java and mvn on PATH (scripts/bootstrap installs them)")
    print(
        f"  resolving Kafka {kafka_version()} jars from Maven Central into {libs} ...", flush=True
    )
    run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
        ]
    )
    done.touch()
    return libs


def _properties(cfg: Settings, data: Path) -> str:
    host, port = cfg.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    ctl = cfg.kafka_controller_port
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{ctl}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{ctl}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={data}",
            # One local broker: replication factor 1; topics are never created implicitly.
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=8",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "min.insync.replicas=1",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.hours=24",
            "",
        ]
    )


class KafkaBroker:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.home = cfg.state_dir / "kafka"
        self.data = self.home / "data"
        self.config_file = self.home / "server.properties"
        self.proc = Managed("kafka", cfg.state_dir)

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        libs = ensure_jars(self.cfg)
        return [
            "java",
            f"-Xmx{heap}",
            f"-Xms{heap}",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def up(self) -> None:
        if self.proc.pid() is None:
            self.home.mkdir(parents=True, exist_ok=True)
            self.config_file.write_text(_properties(self.cfg, self.data))
            if not (self.data / "meta.properties").exists():
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
                run(
                    self._java(
                        "kafka.tools.StorageTool",
                        "format",
                        "-t",
                        cluster_id,
                        "-c",
                        str(self.config_file),
                    )
                )
            heap = self.cfg.kafka_heap
            self.proc.start(
                self._java("kafka.Kafka", str(self.config_file), heap=heap),
                marker=str(self.config_file),
            )
        # Probe the port first: an admin client against a closed port logs every 50 ms.
        bootstrap = self.cfg.kafka_bootstrap.split(",")[0]
        if not wait_until(lambda: port_open(bootstrap), 90, interval=0.2) or not wait_until(
            self.healthy, 60, interval=0.5
        ):
            raise StackError(f"Kafka did not become healthy; see {self.proc.log_file}")
        self.create_topics()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.cfg.kafka_bootstrap})

    def healthy(self) -> bool:
        """Create the health-check topic if needed and see it listed."""
        admin = self.admin()
        topics = admin.list_topics(timeout=2).topics
        if HEALTH_TOPIC not in topics:
            futures = admin.create_topics([NewTopic(HEALTH_TOPIC, 1, 1)], operation_timeout=5)
            futures[HEALTH_TOPIC].result(timeout=10)
            topics = admin.list_topics(timeout=2).topics
        return HEALTH_TOPIC in topics

    def create_topics(self) -> None:
        wanted = {
            self.cfg.orders_topic: self.cfg.orders_partitions,
            self.cfg.vouchers_topic: self.cfg.vouchers_partitions,
            self.cfg.deadletter_topic: 1,
        }
        admin = self.admin()
        existing = admin.list_topics(timeout=5).topics
        new = [NewTopic(name, parts, 1) for name, parts in wanted.items() if name not in existing]
        if new:
            for future in admin.create_topics(new, operation_timeout=10).values():
                future.result(timeout=30)

    def down(self) -> bool:
        return self.proc.stop(timeout=60)

    def processes(self) -> list[Managed]:
        return [self.proc]

    def status(self) -> str:
        pid = self.proc.pid()
        return f"pid {pid}, {self.cfg.kafka_bootstrap}" if pid else "stopped"
