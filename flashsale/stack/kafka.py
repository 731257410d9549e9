"""Apache Kafka in KRaft mode on loopback: 3 nodes (replication factor 3, min.insync.replicas 2),
or 1 for a quick local run (``kafka_brokers``).

Combined nodes, not separate controllers: each of the 3 processes is a broker and a voter of the
controller quorum. Separate controllers would be 3 more JVMs (~250 MB RSS each, plus their share
of 2 cores) for an isolation the local stack does not need; a quorum of 3 combined nodes still
survives the loss of any one process, which is the fault the tests inject.

Broker n (1-based) listens on the port of ``kafka_bootstrap``'s first address + 2(n-1), its
controller on ``kafka_controller_port`` + 2(n-1). The jars come from Maven Central through
``stack/kafka/pom.xml`` into a cache directory outside the repository. Every node's storage is
formatted once with one cluster id; readiness is polled, never slept for.
"""

from __future__ import annotations

import base64
import re
import shutil
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaException

from flashsale.stack.kafka_topics import Topics
from flashsale.stack.processes import Managed, StackError, port_open, run, wait_until
from kernel.resources import package_file
from kernel.settings import Settings

POM = package_file("flashsale.stack", "kafka", "pom.xml")
LOG4J = package_file("flashsale.stack", "kafka", "log4j2.properties")
START_TIMEOUT_S = 120.0  # three JVMs starting at once on 2 cores beside a test run
STOP_TIMEOUT_S = 30.0
ACTIVATION = "] Performing controller activation"  # "[<time>] WARN [QuorumController id=N]..."


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


@dataclass(frozen=True, slots=True)
class KafkaNode:
    """One broker + controller process."""

    node_id: int
    address: str  # host:port of its client listener
    controller: str  # host:port of its controller listener
    home: Path
    proc: Managed

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def formatted(self) -> bool:
        return (self.home / "data" / "meta.properties").exists()


def nodes_of(cfg: Settings, count: int) -> list[KafkaNode]:
    """The nodes of a ``count``-broker stack. One broker keeps the layout of the single-broker
    stack before it (``<state>/kafka``, PID name ``kafka``), so a running one is still found."""
    host, port = cfg.kafka_bootstrap.split(",")[0].strip().rsplit(":", 1)
    nodes = []
    for n in range(1, count + 1):
        name = "kafka" if count == 1 else f"kafka-{n}"
        nodes.append(
            KafkaNode(
                node_id=n,
                address=f"{host}:{int(port) + 2 * (n - 1)}",
                controller=f"{host}:{cfg.kafka_controller_port + 2 * (n - 1)}",
                home=cfg.state_dir / name,
                proc=Managed(name, cfg.state_dir),
            )
        )
    return nodes


def _running(cfg: Settings, count: int) -> bool:
    """Does a process of a ``count``-broker layout run in this state directory?"""
    names = ["kafka"] if count == 1 else [f"kafka-{n}" for n in range(1, count + 1)]
    return any(Managed(name, cfg.state_dir).pid() is not None for name in names)


def replication(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas): with 3, one broker may be lost and an
    acknowledged message still has a second copy."""
    return (3, 2) if brokers >= 3 else (1, 1)


def properties(cfg: Settings, node: KafkaNode, nodes: list[KafkaNode]) -> str:
    rf, min_isr = replication(len(nodes))
    voters = ",".join(f"{n.node_id}@{n.controller}" for n in nodes)
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners=PLAINTEXT://{node.address},CONTROLLER://{node.controller}",
            f"advertised.listeners=PLAINTEXT://{node.address}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={node.home / 'data'}",
            # Topics are never created implicitly; a topic created without a factor gets RF 3.
            "auto.create.topics.enable=false",
            f"default.replication.factor={rf}",
            f"offsets.topic.replication.factor={rf}",
            "offsets.topic.num.partitions=8",
            f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={min_isr}",
            f"share.coordinator.state.topic.replication.factor={rf}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            # The project's topics carry min.insync.replicas=2 themselves (kafka_topics.py); the
            # broker default stays 1 so a test's scratch topic of RF 1 still takes acks=all.
            "min.insync.replicas=1",
            "unclean.leader.election.enable=false",
            # A SIGKILLed broker is fenced, and its leaders moved, once it misses heartbeats for
            # this long (default 9 s): the pause a buyer sees when a broker dies.
            f"broker.session.timeout.ms={cfg.kafka_session_timeout_ms}",
            f"broker.heartbeat.interval.ms={max(cfg.kafka_session_timeout_ms // 6, 100)}",
            # Sized for 3 JVMs on 2 cores: few threads, and a log-cleaner buffer of 16 MB, not
            # the default 128 MB taken from a small heap.
            "num.network.threads=2",
            "num.io.threads=4",
            "background.threads=4",
            "num.replica.fetchers=1",
            "log.cleaner.threads=1",
            "log.cleaner.dedupe.buffer.size=16777216",
            "group.initial.rebalance.delay.ms=0",
            # A restarted broker gets its preferred leaderships back within a minute, not five.
            "leader.imbalance.check.interval.seconds=30",
            "log.retention.hours=24",
            "",
        ]
    )


class KafkaCluster:
    """The stack's Kafka: the nodes the settings ask for, unless a stack of the other size is
    running in this state directory; then that one is used (and reported) until ``stack down``,
    so a running stack is never restarted behind its users' backs."""

    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.wanted = cfg.kafka_brokers
        if self.wanted not in (1, 3):
            raise StackError(f"FLASHSALE_KAFKA_BROKERS is 1 or 3, not {self.wanted}")
        other = 4 - self.wanted
        self.nodes = nodes_of(cfg, other if _running(cfg, other) else self.wanted)
        self.topics = Topics(cfg, self.bootstrap, *replication(len(self.nodes)))

    @property
    def mismatch(self) -> str:
        if len(self.nodes) == self.wanted:
            return ""
        return f" (settings want {self.wanted}: `flashsale stack down`, then up, to switch)"

    @property
    def bootstrap(self) -> str:
        """Every broker's address: a client started while one is down still finds the rest."""
        return ",".join(n.address for n in self.nodes)

    def processes(self) -> list[Managed]:
        return [n.proc for n in self.nodes]

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        libs = ensure_jars(self.cfg)
        return [
            "java",
            f"-Xmx{heap}",
            f"-Xms{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _cluster_id(self) -> str:
        """One id for every node's storage: read from a formatted node, else made once."""
        for node in self.nodes:
            meta = node.home / "data" / "meta.properties"
            if meta.exists():
                found = re.search(r"^cluster\.id=(\S+)", meta.read_text(), re.MULTILINE)
                if found:
                    return found.group(1)
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def _format(self, nodes: list[KafkaNode]) -> None:
        cluster_id = self._cluster_id()

        def format_one(node: KafkaNode) -> None:
            argv = ["-t", cluster_id, "-c", str(node.config_file)]
            run(self._java("kafka.tools.StorageTool", "format", *argv))

        with ThreadPoolExecutor(len(nodes)) as pool:  # a JVM start each: in parallel
            list(pool.map(format_one, nodes))

    def start(self, *nodes: KafkaNode) -> None:
        """Start the nodes that are not running (formatting new storage first); does not wait
        for them: ``up`` or ``wait_healthy`` does."""
        stopped = [n for n in nodes if n.proc.pid() is None]
        if stopped:
            ensure_jars(self.cfg)  # once, before the parallel formats would each resolve them
        for node in stopped:
            node.home.mkdir(parents=True, exist_ok=True)
            node.config_file.write_text(properties(self.cfg, node, self.nodes))
        if fresh := [n for n in stopped if not n.formatted]:
            self._format(fresh)
        for node in stopped:
            node.proc.start(
                self._java("kafka.Kafka", str(node.config_file), heap=self.cfg.kafka_heap),
                marker=str(node.config_file),
            )

    def up(self) -> None:
        if self.mismatch:
            running = f"{len(self.nodes)} broker(s) running{self.mismatch}"
            print(f"stack: kafka: {running}", file=sys.stderr)
        self.start(*self.nodes)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = START_TIMEOUT_S) -> None:
        """Every node's port open, every broker registered, the project's topics created (or
        checked) and fully in sync."""
        # Probe the ports first: an admin client against a closed port logs every 50 ms.
        for node in self.nodes:
            if not wait_until(partial(port_open, node.address), timeout, interval=0.2):
                raise StackError(f"Kafka broker {node.node_id} did not listen; {self._see(node)}")
        ids = {n.node_id for n in self.nodes}
        if not wait_until(lambda: self.topics.brokers() >= ids, timeout, interval=0.25):
            raise StackError(f"Kafka brokers {sorted(ids)} did not all register; {self._see()}")
        self.topics.ensure()
        if not wait_until(self.topics.in_sync, timeout, interval=0.25):
            raise StackError(f"Kafka's topics did not get fully in sync; {self._see()}")
        self.topics.balance_leaders()

    def active_controller(self) -> KafkaNode | None:
        """The running node that became the active controller last. Read from the nodes' logs:
        librdkafka has no DescribeQuorum, and a node logs (at WARN) each activation."""
        latest: tuple[str, KafkaNode] | None = None
        for node in self.nodes:
            if node.proc.pid() is None or not node.proc.log_file.exists():
                continue
            with node.proc.log_file.open(errors="replace") as log:
                stamps = [line[:25] for line in log if ACTIVATION in line]
            if stamps and (latest is None or stamps[-1] > latest[0]):
                latest = stamps[-1], node
        return latest[1] if latest else None

    def _see(self, node: KafkaNode | None = None) -> str:
        logs = [node] if node else self.nodes
        return "see " + ", ".join(str(n.proc.log_file) for n in logs)

    def down(self) -> bool:
        """SIGTERM every node at once and wait: stopped one by one, the last would wait for a
        controller quorum that is already gone."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            stopped = list(pool.map(lambda n: n.proc.stop(timeout=STOP_TIMEOUT_S), self.nodes))
        return any(stopped)

    def status(self) -> str:
        up = [n for n in self.nodes if n.proc.pid() is not None]
        rf, min_isr = replication(len(self.nodes))
        summary = f"{len(up)}/{len(self.nodes)} brokers up, RF {rf}, min.insync.replicas {min_isr}"
        if len(self.nodes) == 1:  # the one broker has no line of its own
            summary = f"{self._line(self.nodes[0], self._leadership())}; {summary}"
        elif (controller := self.active_controller()) is not None:
            summary += f", active controller {controller.proc.name}"
        return summary + self.mismatch

    def broker_status(self) -> dict[str, str]:
        """One line per broker (of several): pid, address, partitions led, under-replicated."""
        if len(self.nodes) == 1:
            return {}
        counts = self._leadership()
        return {node.proc.name: self._line(node, counts) for node in self.nodes}

    def _leadership(self) -> dict[int, tuple[int, int]] | None:
        """Per broker (partitions led, under-replicated); None when no broker answers."""
        if not any(n.proc.pid() is not None and port_open(n.address) for n in self.nodes):
            return None
        try:
            return self.topics.leadership()
        except KafkaException:
            return None

    @staticmethod
    def _line(node: KafkaNode, counts: dict[int, tuple[int, int]] | None) -> str:
        pid = node.proc.pid()
        if pid is None:
            return f"stopped ({node.address})"
        if counts is None:
            return f"pid {pid}, {node.address}, not answering"
        led, under = counts.get(node.node_id, (0, 0))
        return f"pid {pid}, {node.address}, leads {led} partitions, {under} under-replicated"
