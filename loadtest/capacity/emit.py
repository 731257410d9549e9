"""The planner's ``--emit k8s DIR``: its options, and the manifests written from its answer."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from pathlib import Path

from kernel.settings import settings
from loadtest.capacity import k8s
from loadtest.capacity.edge import balancer_pods
from loadtest.capacity.manifests import Sizing
from loadtest.capacity.model import Figures, Fleet, Target

_DEFAULTS = Sizing(0, 0.0, 0.0, 0.0, 0.0, 0, 0, "")
# Sizing's fields with a default that the planner's answer sets, not an option.
_PLANNED = {"forwarded_share", "balancer_cores"}


def k8s_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes (--emit k8s DIR)")
    d = _DEFAULTS
    group.add_argument("--image", default=d.image, help="the project's container image")
    group.add_argument("--kubectl-image", default=d.kubectl_image, help="the scaler's image")
    group.add_argument("--redis-nodes", default=d.redis_nodes, help="Redis Cluster seed nodes")
    group.add_argument("--kafka-bootstrap", default=d.kafka_bootstrap, help="Kafka bootstrap")
    group.add_argument(
        "--idle-replicas", type=int, default=d.idle_replicas, help="gateways outside a sale"
    )
    group.add_argument(
        "--sale-start",
        default=d.sale_start,
        help="ISO 8601 (e.g. 2026-12-12T10:00:00Z): the pre-scale runs --prescale-lead-min"
        " before it; none given: the pre-scale CronJob is rendered suspended",
    )
    group.add_argument("--sale-end", default=d.sale_end, help="ISO 8601: scale back after it")
    group.add_argument("--prescale-lead-min", type=int, default=d.prescale_lead_min)
    group.add_argument("--haproxy-image", default=d.haproxy_image, help="the balancers' image")
    group.add_argument(
        "--balancer-cores-per-pod",
        type=int,
        default=d.balancer_cores_per_pod,
        help="haproxy threads (and cores requested) per balancer pod",
    )
    group.add_argument("--namespace", default=d.namespace, help="the namespace it all runs in")
    group.add_argument(
        "--pod-cidr", default=d.pod_cidr, help="the pods' addresses: the balancers' among them"
    )
    group.add_argument("--pg-port", type=int, default=d.pg_port, help="PostgreSQL's port")
    group.add_argument(
        "--monitoring",
        action="store_true",
        help="also a ServiceMonitor and a PrometheusRule (needs the Prometheus Operator's CRDs)",
    )
    group.add_argument(
        "--monitoring-namespace", default=d.monitoring_namespace, help="Prometheus's namespace"
    )


def emit_k8s(
    directory: Path, fleet: Fleet, target: Target, figures: Figures, args: argparse.Namespace
) -> None:
    # The options are the deployment's own choices: Sizing's fields that have a default.
    choices = {
        f.name: getattr(args, f.name)
        for f in fields(Sizing)
        if f.default is not MISSING and f.name not in _PLANNED
    }
    sized = k8s.sizing(fleet, target, figures, settings().orders_partitions, **choices)
    print(
        f"\nKubernetes manifests ({balancer_pods(sized)} balancers, {sized.gateway_replicas}"
        f" gateways, {sized.writers} writers):"
    )
    for path in k8s.write(sized, directory):
        print(f"  {path}")
