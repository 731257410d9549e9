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


# The options, in --help's order: (Sizing field, help); each is --<field>, its default and type
# the field's (a bool one a switch).
OPTIONS = (
    ("image", "the project's container image"),
    ("kubectl_image", "the scaler's image"),
    ("redis_nodes", "Redis Cluster seed nodes"),
    ("kafka_bootstrap", "Kafka bootstrap"),
    ("idle_replicas", "gateways outside a sale"),
    (
        "sale_start",
        "ISO 8601 (e.g. 2026-12-12T10:00:00Z): the pre-scale runs --prescale-lead-min before it;"
        " none given: the pre-scale CronJob is rendered suspended",
    ),
    ("sale_end", "ISO 8601: scale back after it"),
    ("prescale_lead_min", None),
    ("haproxy_image", "the balancers' image"),
    ("balancer_cores_per_pod", "haproxy threads (and cores requested) per balancer pod"),
    ("namespace", "the namespace it all runs in"),
    ("pod_cidr", "the pods' addresses: the balancers' among them"),
    ("pg_port", "PostgreSQL's port"),
    (
        "monitoring",
        "also a ServiceMonitor and a PrometheusRule (needs the Prometheus Operator's CRDs)",
    ),
    ("monitoring_namespace", "Prometheus's namespace"),
)


def k8s_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes (--emit k8s DIR)")
    for name, text in OPTIONS:
        flag, default = "--" + name.replace("_", "-"), getattr(_DEFAULTS, name)
        if isinstance(default, bool):
            group.add_argument(flag, action="store_true", help=text)
        else:
            group.add_argument(flag, type=type(default), default=default, help=text)


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
