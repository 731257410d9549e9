"""The local Kafka's topics as the stack sees them: created with the cluster's replication factor
and ``min.insync.replicas``, checked when they exist, and counted per broker for ``status``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from flashsale.stack.processes import StackError
from kernel.settings import Settings

HEALTH_TOPIC = "flashsale.healthcheck"
MIN_ISR = "min.insync.replicas"


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    partitions: int
    replication_factor: int  # the smallest over its partitions
    min_insync_replicas: int
    under_replicated: int  # partitions whose in-sync replicas are fewer than their replicas
    offline: int  # partitions without a leader


class Topics:
    def __init__(self, cfg: Settings, bootstrap: str, rf: int, min_isr: int) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        self.rf = rf
        self.min_isr = min_isr

    @property
    def wanted(self) -> dict[str, int]:
        """The project's topics and their partition counts."""
        return {
            self.cfg.orders_topic: self.cfg.orders_partitions,
            self.cfg.vouchers_topic: self.cfg.vouchers_partitions,
            self.cfg.deadletter_topic: 1,
            HEALTH_TOPIC: 1,
        }

    def admin(self) -> AdminClient:
        # Errors reach the caller as exceptions; librdkafka's own log would add a line per
        # reconnect to a broker that is down (which the fault tests do on purpose).
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 2})

    def _metadata(self, timeout: float = 5.0) -> Any:
        return self.admin().list_topics(timeout=timeout)

    def brokers(self) -> set[int]:
        """The ids of the brokers registered and not fenced."""
        return set(self._metadata(2).brokers)

    def ensure(self) -> None:
        """Create the missing topics; refuse an existing one with too few replicas, and give
        one with another ``min.insync.replicas`` ours (a config change, no data moved)."""
        admin = self.admin()
        existing = self.describe()
        config = {MIN_ISR: str(self.min_isr)}
        new = [
            NewTopic(name, parts, self.rf, config=config)
            for name, parts in self.wanted.items()
            if name not in existing
        ]
        if new:
            for future in admin.create_topics(new, operation_timeout=10).values():
                future.result(timeout=30)
        for name, state in existing.items():
            if state.replication_factor < self.rf:
                raise StackError(
                    f"topic {name} has replication factor {state.replication_factor}, the stack"
                    f" wants {self.rf}: delete it (or the state directory) and start again"
                )
            if state.min_insync_replicas != self.min_isr:
                entry = ConfigEntry(
                    MIN_ISR, str(self.min_isr), incremental_operation=AlterConfigOpType.SET
                )
                resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
                for future in admin.incremental_alter_configs([resource]).values():
                    future.result(timeout=30)

    def describe(self, names: list[str] | None = None) -> dict[str, TopicState]:
        """The state of ``names`` (default: the project's topics) that exist."""
        wanted = names if names is not None else list(self.wanted)
        admin = self.admin()
        topics = admin.list_topics(timeout=5).topics
        present = [name for name in wanted if name in topics]
        if not present:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in present]
        configs = {
            resource.name: future.result(timeout=10)
            for resource, future in admin.describe_configs(resources).items()
        }
        found = {}
        for name in present:
            parts = topics[name].partitions.values()
            found[name] = TopicState(
                name=name,
                partitions=len(parts),
                replication_factor=min(len(p.replicas) for p in parts),
                min_insync_replicas=int(configs[name][MIN_ISR].value),
                under_replicated=sum(len(p.isrs) < len(p.replicas) for p in parts),
                offline=sum(p.leader < 0 for p in parts),
            )
        return found

    def in_sync(self) -> bool:
        """Every project topic exists with our factor, a leader and all replicas in sync."""
        states = self.describe()
        return len(states) == len(self.wanted) and all(
            s.replication_factor >= self.rf and s.under_replicated == 0 and s.offline == 0
            for s in states.values()
        )

    def leadership(self) -> dict[int, tuple[int, int]]:
        """Per broker id over every topic: (partitions it leads, of those under-replicated)."""
        counts: dict[int, tuple[int, int]] = {}
        for topic in self._metadata(3).topics.values():
            for p in topic.partitions.values():
                if p.leader < 0:
                    continue
                led, under = counts.get(p.leader, (0, 0))
                counts[p.leader] = (led + 1, under + (len(p.isrs) < len(p.replicas)))
        return counts

    def balance_leaders(self) -> None:
        """Give each partition back to its preferred replica: after a restart the broker that
        registered first leads everything (Kafka also rebalances, but only every few minutes)."""
        moved = [
            TopicPartition(topic.topic, p.id)
            for topic in self._metadata().topics.values()
            for p in topic.partitions.values()
            if p.replicas and p.leader != p.replicas[0] and p.replicas[0] in p.isrs
        ]
        if moved:
            admin = self.admin()  # held until the answer: a collected client fails its futures
            # Per-partition failures (already preferred, election in progress) are harmless.
            admin.elect_leaders(ElectionType.PREFERRED, moved).result(timeout=30)
