"""The namespace (Pod Security "restricted" enforced by the cluster too), its NetworkPolicies, and
the Prometheus Operator's objects when asked for (``monitoring``).

Traffic: nothing comes in but what a policy lets in. The balancers take anyone's connections;
the gateways only the balancers' and Prometheus's; the writer's and reconciliation's metrics
ports only Prometheus's. Out, every pod may ask the cluster DNS; the project's pods reach the
stack's ports only (Redis's and Kafka's from their addresses, PostgreSQL's ``pg_port``: the
services are outside, at addresses the manifests do not know); the balancers the gateways too;
the scaler only the API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kernel.resources import asset
from loadtest.capacity.edge import EDGE_PORT
from loadtest.capacity.manifests import (
    GATEWAY_PORT,
    RECONCILE_METRICS_PORT,
    WRITER_METRICS_PORT,
    Sizing,
)
from loadtest.capacity.pods import APP, Doc, labels, meta

RULES = asset("deploy", "prometheus", "rules")
STACK_CLIENTS = ("gateway", "writer", "expiry", "reconcile", "failover-watch", "migrate")
API_SERVER_PORTS = (443, 6443)  # the kubernetes Service's port, and the apiserver's behind it


def namespace(s: Sizing) -> Doc:
    enforce = {
        f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": s.namespace, "labels": {"app.kubernetes.io/name": APP, **enforce}},
    }


def _policy(name: str, selector: Doc, types: list[str], **rules: Any) -> Doc:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(f"flashsale-{name}", "network"),
        "spec": {"podSelector": selector, "policyTypes": types, **rules},
    }


def _components(*names: str) -> Doc:
    return {
        "matchLabels": {"app.kubernetes.io/name": APP},
        "matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "In", "values": list(names)}
        ],
    }


def _tcp(*ports: int | str) -> list[Doc]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _stack_ports(s: Sizing) -> list[int]:
    addresses = [*s.redis_nodes.split(","), *s.kafka_bootstrap.split(",")]
    return sorted({int(a.strip().rsplit(":", 1)[1]) for a in addresses} | {s.pg_port})


def network_policies(s: Sizing) -> list[Doc]:
    prometheus = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": s.monitoring_namespace}
        }
    }
    balancers = {"podSelector": {"matchLabels": labels("balancer")}}
    dns = {
        "to": [{"namespaceSelector": {}}],
        "ports": [{"protocol": "UDP", "port": 53}, *_tcp(53)],
    }
    return [
        _policy("default-deny", {}, ["Ingress", "Egress"]),
        _policy("dns", {}, ["Egress"], egress=[dns]),
        _policy(
            "balancer-ingress",
            {"matchLabels": labels("balancer")},
            ["Ingress"],
            ingress=[{"ports": _tcp(EDGE_PORT)}],  # the internet's, through the LoadBalancer
        ),
        _policy(
            "gateway-ingress",
            {"matchLabels": labels("gateway")},
            ["Ingress"],
            ingress=[{"from": [balancers, prometheus], "ports": _tcp(GATEWAY_PORT)}],
        ),
        _policy(
            "metrics-ingress",
            _components("writer", "reconcile"),
            ["Ingress"],
            ingress=[
                {"from": [prometheus], "ports": _tcp(WRITER_METRICS_PORT, RECONCILE_METRICS_PORT)}
            ],
        ),
        _policy(
            "stack-egress",
            _components(*STACK_CLIENTS, "balancer"),  # the balancer's agent reads the stack
            ["Egress"],
            egress=[{"ports": _tcp(*_stack_ports(s))}],
        ),
        _policy(
            "balancer-egress",
            {"matchLabels": labels("balancer")},
            ["Egress"],
            egress=[
                {
                    "to": [{"podSelector": {"matchLabels": labels("gateway")}}],
                    "ports": _tcp(GATEWAY_PORT),
                }
            ],
        ),
        _policy(
            "scaler-egress",
            {"matchLabels": labels("scaler")},
            ["Egress"],
            egress=[{"ports": _tcp(*API_SERVER_PORTS)}],
        ),
    ]


def _rule_groups() -> list[Doc]:
    groups: list[Doc] = []
    for path in sorted(Path(RULES).glob("*.yml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    return groups


def monitoring(s: Sizing) -> list[Doc]:
    """A headless Service over every pod with a metrics port (named ports resolve per pod:
    the writer's 9108, reconciliation's 9109, the gateways' http), scraped every 2 s (the
    recording rules rate over 10 s), and the rules of deploy/prometheus/rules/."""
    name = "flashsale-metrics"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, "metrics"),
        "spec": {
            "clusterIP": "None",
            "selector": {"app.kubernetes.io/name": APP},
            "ports": [
                {"name": "metrics", "port": WRITER_METRICS_PORT, "targetPort": "metrics"},
                {"name": "http", "port": GATEWAY_PORT, "targetPort": "http"},
            ],
        },
    }
    scrape = {"path": "/metrics", "interval": "2s"}
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta(name, "metrics"),
        "spec": {
            "selector": {"matchLabels": labels("metrics")},
            "endpoints": [{"port": "metrics", **scrape}, {"port": "http", **scrape}],
        },
    }
    rules = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta("flashsale", "metrics"),
        "spec": {"groups": _rule_groups()},
    }
    return [service, monitor, rules]
