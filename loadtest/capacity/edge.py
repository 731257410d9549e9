"""The balancer tier: haproxy pods in front of the gateways, each with the sold-out agent beside
it, behind a Service of type LoadBalancer. The same haproxy configuration as the fleet's
(flashsale/fleet/haproxy.py renders deploy/haproxy/haproxy.cfg.tmpl), with what differs on a
cluster put in: it listens on every address of its pod, loads the Lua bucket from its ConfigMap,
runs a thread per core it requests, and finds the gateways through DNS (a headless Service),
since gateway pods come and go with the autoscaler.

The agent (``python -m flashsale.fleet.agent``, docs/fleet.md) edits its own haproxy's sold-out
table through the runtime API socket in a volume both containers share; on one machine a
supervisor restarts it, here the kubelet does. Both run as the same user: the socket is mode
600."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

from flashsale.fleet.haproxy import CLIENT_BUCKET_LUA, Edge, render
from flashsale.fleet.namespaces import Host
from kernel.settings import Settings
from loadtest.capacity.manifests import CONFIG, GATEWAY, GATEWAY_PORT, PLANNED, SECRETS, Sizing
from loadtest.capacity.pods import Doc, budget, deployment, labels, meta, pod

BALANCER = "flashsale-balancer"
GATEWAY_PODS = "flashsale-gateway-pods"  # headless: one DNS record per ready gateway pod
EDGE_PORT = 8080  # unprivileged: the pod has no capability to bind below 1024
CONFIG_DIR = "/usr/local/etc/haproxy"
RUN_DIR = "/var/run/haproxy"
SOCKET = f"{RUN_DIR}/haproxy.sock"
_SLOT = "gateway-slot.invalid"  # the one host handed to the renderer, replaced below


def balancer_pods(s: Sizing) -> int:
    """The planner's balancer cores in pods of ``balancer_cores_per_pod``; at least 2, so a
    node's loss leaves a balancer (also when the tier's costs were never measured)."""
    return max(2, math.ceil(s.balancer_cores / s.balancer_cores_per_pod))


def _swap(text: str, old: str, new: str) -> str:
    """``old`` must occur exactly once: the template changed shape if it does not."""
    if text.count(old) != 1:
        raise ValueError(f"the haproxy template no longer has one {old!r}")
    return text.replace(old, new)


def haproxy_config(s: Sizing) -> str:
    # The edge's numbers are the settings' defaults, the ones the gateways run with; a queue
    # bound per gateway, for the planned fleet.
    edge = Edge.of(Settings())
    edge = dataclasses.replace(edge, queue_per_server=edge.queue_per_server * s.gateway_replicas)
    run = Path(RUN_DIR)
    text = render(
        [Host(1, _SLOT)], GATEWAY_PORT, EDGE_PORT, run / "haproxy.sock", run / "haproxy.pid", edge
    )
    text = _swap(text, f"bind 127.0.0.1:{EDGE_PORT}", f"bind :{EDGE_PORT}")
    text = _swap(text, f"lua-load {CLIENT_BUCKET_LUA}", f"lua-load {CONFIG_DIR}/{LUA}")
    text = _swap(
        text,
        "\nglobal\n",
        f"\nglobal\n    # One thread per core the pod requests (not the node's count).\n"
        f"    nbthread {s.balancer_cores_per_pod}\n",
    )
    gateways = f"{GATEWAY_PODS}.{s.namespace}.svc.cluster.local:{GATEWAY_PORT}"
    slots = f"1-{s.max_replicas}"  # as many as the autoscaler may run
    dns = "resolvers cluster init-addr none"
    text = _swap(
        text,
        f"    server gw1 {_SLOT}:{GATEWAY_PORT} check\n"
        f"    server gw1-open {_SLOT}:{GATEWAY_PORT} backup",
        f"    server-template gw {slots} {gateways} check {dns}\n"
        f"    server-template gw-open {slots} {gateways} backup {dns}",
    )
    return text + (
        "\nresolvers cluster\n"
        "    # The pod's own resolver (the cluster DNS); a gateway pod that comes or goes is\n"
        "    # in or out of the rotation within a couple of seconds.\n"
        "    parse-resolv-conf\n"
        "    hold valid 2s\n"
        "    # Every ready gateway pod in one answer (EDNS0).\n"
        "    accepted_payload_size 8192\n"
    )


LUA = CLIENT_BUCKET_LUA.name


def balancer(s: Sizing) -> list[Doc]:
    cfg = haproxy_config(s)
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(BALANCER, "balancer"),
        "data": {"haproxy.cfg": cfg, LUA: CLIENT_BUCKET_LUA.read_text()},
    }
    run = {"name": "run", "mountPath": RUN_DIR}
    tcp = {"tcpSocket": {"port": "edge"}, "periodSeconds": 2}
    haproxy = {
        "name": "haproxy",
        "image": s.haproxy_image,
        "command": ["haproxy", "-db", "-f", f"{CONFIG_DIR}/haproxy.cfg"],
        # The key it verifies buyer tokens with (flashsale/fleet/client_buckets.py), from the
        # Secret the gateways read it from; never in the ConfigMap.
        "env": [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": SECRETS, "key": name}}}
            for name in Edge.of(Settings()).environment()
        ],
        "ports": [{"name": "edge", "containerPort": EDGE_PORT}],
        "readinessProbe": {**tcp, "failureThreshold": 2},
        "livenessProbe": {**tcp, "failureThreshold": 5},
        "resources": {
            "requests": {"cpu": str(s.balancer_cores_per_pod), "memory": "256Mi"},
            "limits": {"memory": "1Gi"},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}, run],
    }
    agent = {
        "name": "sold-out-agent",
        "image": s.image,
        "command": ["python", "-m", "flashsale.fleet.agent", SOCKET, f"{RUN_DIR}/agent.ready"],
        "envFrom": [{"configMapRef": {"name": CONFIG}}, {"secretRef": {"name": SECRETS}}],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        },
        "volumeMounts": [run],
    }
    volumes = (
        {"name": "config", "configMap": {"name": BALANCER}},
        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    )
    sized = (
        f"{s.balancer_cores} cores (the planner's balancer tier)"
        if s.balancer_cores
        else "not sized: no committed balancer result (python -m loadtest.bench --only balancer)"
    )
    annotations = {
        PLANNED + "balancer-cores": sized,
        # A new configuration rolls the pods (a ConfigMap change alone would not).
        PLANNED + "haproxy-config-sha256": hashlib.sha256(cfg.encode()).hexdigest(),
    }
    balancers = deployment(
        BALANCER,
        "balancer",
        balancer_pods(s),
        pod([haproxy, agent], volumes=volumes, terminationGracePeriodSeconds=30),
        annotations,
        strategy={"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
    )
    public = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(BALANCER, "balancer"),
        "spec": {
            "type": "LoadBalancer",
            # Only to a balancer on the node the traffic arrived at: the client's own address
            # reaches haproxy (its per-address bucket, X-Forwarded-For for the gateways).
            "externalTrafficPolicy": "Local",
            "selector": labels("balancer"),
            "ports": [{"name": "http", "port": 80, "targetPort": "edge"}],
        },
    }
    discovery = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(GATEWAY_PODS, "gateway", annotations={PLANNED + "for": GATEWAY}),
        "spec": {
            "clusterIP": "None",
            "selector": labels("gateway"),
            "ports": [{"name": "http", "port": GATEWAY_PORT, "targetPort": "http"}],
        },
    }
    return [config, balancers, public, discovery, budget(BALANCER, "balancer", 1)]
