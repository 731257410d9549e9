"""The Kubernetes objects of a fleet (loadtest/capacity/k8s.py renders them to YAML): the gateway
(Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler, and a CronJob that scales it
up before the sale, since autoscaling reacts too slowly for a two-second spike, and one that lets
it down after), the writers, the jobs, the configuration. Redis Cluster, Kafka and PostgreSQL
are external services: their addresses are configuration, PostgreSQL's DSN a secret."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]
CONFIG = "flashsale-config"
SECRETS = "flashsale-secrets"  # not in the repository: deploy/k8s/README.md lists its keys
GATEWAY = "flashsale-gateway"
SCALER = "flashsale-scaler"
GATEWAY_PORT, WRITER_METRICS_PORT, RECONCILE_METRICS_PORT = 8088, 9108, 9109
RECONCILE_EVERY_S = 10
PLANNED = "capacity.flashsale/"  # annotation prefix: what the planner sized from


@dataclass(frozen=True, slots=True)
class Sizing:
    """What the manifests are rendered from: the planner's fleet, its measured figures, and the
    deployment's own choices. Kept beside the manifests as sizing.json."""

    gateway_replicas: int  # one single-worker process per pod, one core each
    utilisation: float  # of a core at the target load: the autoscaler's target
    headroom: float  # the busiest a core may run
    cpu_us_per_request: float  # gateway CPU per answer at that utilisation, the mix weighted
    rps: float  # offered at the peak
    writers: int  # aligned with the partitions
    orders_partitions: int
    source: str  # which figures, which command
    image: str = "flashsale-gateway:0.1.0"
    kubectl_image: str = "registry.k8s.io/kubectl:v1.33.0"
    redis_nodes: str = "redis-cluster:6379"
    kafka_bootstrap: str = "kafka:9092"
    idle_replicas: int = 2  # the autoscaler's floor outside a sale
    sale_start: str = ""  # ISO 8601 in UTC; empty: the pre-scale is rendered suspended
    sale_end: str = ""
    prescale_lead_min: int = 10

    @property
    def rps_per_pod(self) -> float:
        return self.rps / self.gateway_replicas

    @property
    def max_unavailable(self) -> int:
        """Pods that may be down at once with the others still under the headroom at the
        planned load; at least 1, so a node can always be drained."""
        spare = self.gateway_replicas * (1 - self.utilisation / self.headroom)
        return max(1, math.floor(spare + 1e-9))


def aligned_writers(needed: int, partitions: int) -> int:
    """The fewest writers, at least ``needed``, that split the partitions evenly (each writer
    as many); never more than the partitions (a writer beyond them gets none)."""
    return next(n for n in range(max(1, needed), partitions + 1) if partitions % n == 0)


def _meta(name: str, component: str, **extra: Any) -> Doc:
    labels = {"app.kubernetes.io/name": "flashsale", "app.kubernetes.io/component": component}
    return {"name": name, "labels": labels, **extra}


def _selector(component: str) -> Doc:
    return {"app.kubernetes.io/name": "flashsale", "app.kubernetes.io/component": component}


def _container(name: str, s: Sizing, command: list[str], **extra: Any) -> Doc:
    return {
        "name": name,
        "image": s.image,
        "command": command,
        "envFrom": [{"configMapRef": {"name": CONFIG}}, {"secretRef": {"name": SECRETS}}],
        **extra,
    }


def _pod_annotations(port: int) -> Doc:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}


def _deployment(
    name: str,
    component: str,
    replicas: int | None,
    pod: Doc,
    annotations: Doc | None = None,
    **spec: Any,
) -> Doc:
    """``replicas`` None: the autoscaler's to set (an apply must not reset it)."""
    template = {
        "labels": _selector(component),
        **({"annotations": annotations} if annotations else {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, component),
        "spec": {
            **({} if replicas is None else {"replicas": replicas}),
            "selector": {"matchLabels": _selector(component)},
            "template": {"metadata": template, "spec": pod},
            **spec,
        },
    }


def config_map(s: Sizing) -> Doc:
    data = {
        "FLASHSALE_ENV": "production",  # the gateway refuses the local stack's public secrets
        "FLASHSALE_REDIS_NODES": s.redis_nodes,
        "FLASHSALE_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
        "FLASHSALE_ORDERS_PARTITIONS": str(s.orders_partitions),
        "FLASHSALE_GATEWAY_HOST": "0.0.0.0",  # noqa: S104 - inside the pod, behind its Service
        "FLASHSALE_GATEWAY_PORT": str(GATEWAY_PORT),
        "FLASHSALE_GATEWAY_WORKERS": "1",  # one process per pod: the HPA counts processes
        "FLASHSALE_METRICS_HOST": "0.0.0.0",  # noqa: S104 - the writer's and the job's /metrics
        "FLASHSALE_WRITER_METRICS_PORT": str(WRITER_METRICS_PORT),
        "FLASHSALE_RECONCILE_METRICS_PORT": str(RECONCILE_METRICS_PORT),
        # A stopping gateway fails readiness this long first: the probe's 2 failures x 2 s, plus
        # the endpoints reaching kube-proxy and the ingress (terminationGracePeriodSeconds 30
        # covers it, a request's deadline for what is in flight and the producer's flush).
        "FLASHSALE_GATEWAY_DRAIN_DELAY_MS": "6000",
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(CONFIG, "config"),
        "data": data,
    }


def gateway(s: Sizing) -> list[Doc]:
    http = {"port": "http"}
    probe = {"periodSeconds": 2, "timeoutSeconds": 1}
    container = _container(
        "gateway",
        s,
        ["python", "-m", "gateway"],
        ports=[{"name": "http", "containerPort": GATEWAY_PORT}],
        readinessProbe={"httpGet": {"path": "/readyz", **http}, "failureThreshold": 2, **probe},
        livenessProbe={"httpGet": {"path": "/healthz", **http}, "failureThreshold": 5, **probe},
        startupProbe={"httpGet": {"path": "/healthz", **http}, "failureThreshold": 30, **probe},
        # A core per process, as the planner sizes; no CPU limit: throttling a spike's second
        # would cost more latency than it saves. Memory is not measured by the benchmarks.
        resources={
            "requests": {"cpu": "1", "memory": "512Mi"},
            "limits": {"memory": "1Gi"},
        },
    )
    annotations = {
        **_pod_annotations(GATEWAY_PORT),
        PLANNED + "cpu-us-per-request": f"{s.cpu_us_per_request:.1f}",
        PLANNED + "planned-rps-per-pod": f"{s.rps_per_pod:.0f}",
        PLANNED + "planned-utilisation": f"{s.utilisation:.2f}",
    }
    pod = {"terminationGracePeriodSeconds": 30, "containers": [container]}
    deployment = _deployment(
        GATEWAY,
        "gateway",
        None,
        pod,
        annotations,
        strategy={"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(GATEWAY, "gateway"),
        "spec": {
            "selector": _selector("gateway"),
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(GATEWAY, "gateway"),
        "spec": {
            "maxUnavailable": s.max_unavailable,
            "selector": {"matchLabels": _selector("gateway")},
        },
    }
    return [deployment, service, budget, autoscaler(s)]


def autoscaler(s: Sizing) -> Doc:
    target = {"type": "Utilization", "averageUtilization": round(s.utilisation * 100)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(GATEWAY, "gateway"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": GATEWAY},
            "minReplicas": s.idle_replicas,
            "maxReplicas": 2 * max(s.gateway_replicas, s.idle_replicas),  # twice the plan
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": target}}],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                },
                # Not straight back down after a spike: unpaid orders expire, units sell again.
                "scaleDown": {"stabilizationWindowSeconds": 600},
            },
        },
    }


def _cron(moment: dt.datetime) -> str:
    """Minute hour day month: once a year on that date (the CronJob is re-rendered per sale)."""
    return f"{moment.minute} {moment.hour} {moment.day} {moment.month} *"


def _scale_job(name: str, s: Sizing, replicas: int, when: dt.datetime | None, why: str) -> Doc:
    patch = json.dumps({"spec": {"minReplicas": replicas}})
    kubectl = {
        "image": s.kubectl_image,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }
    pod = {
        "serviceAccountName": SCALER,
        "restartPolicy": "OnFailure",
        # The autoscaler's floor first, so it cannot scale the Deployment back down.
        "initContainers": [
            {
                "name": "floor",
                **kubectl,
                "args": ["patch", "hpa", GATEWAY, "--type=merge", "-p", patch],
            }
        ],
        "containers": [
            {
                "name": "scale",
                **kubectl,
                "args": ["scale", f"deployment/{GATEWAY}", f"--replicas={replicas}"],
            }
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta(name, "scaler", annotations={PLANNED + "why": why}),
        "spec": {
            "schedule": _cron(when) if when else "0 0 1 1 *",
            "timeZone": "Etc/UTC",
            "suspend": when is None,  # no sale time given: nothing runs until it is set
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 120,
            "jobTemplate": {"spec": {"backoffLimit": 3, "template": {"spec": pod}}},
        },
    }


def _moment(text: str) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC) if text else None


def scaler(s: Sizing) -> list[Doc]:
    start, end = _moment(s.sale_start), _moment(s.sale_end)
    lead = dt.timedelta(minutes=s.prescale_lead_min)
    up = start - lead if start else None
    down = end + dt.timedelta(minutes=10) if end else None
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(SCALER, "scaler")}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(SCALER, "scaler"),
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments", "deployments/scale"],
                "resourceNames": [GATEWAY],
                "verbs": ["get", "patch", "update"],
            },
            {
                "apiGroups": ["autoscaling"],
                "resources": ["horizontalpodautoscalers"],
                "resourceNames": [GATEWAY],
                "verbs": ["get", "patch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(SCALER, "scaler"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SCALER},
        "subjects": [{"kind": "ServiceAccount", "name": SCALER}],
    }
    before = (
        f"{s.gateway_replicas} gateways {s.prescale_lead_min} min before the sale: the planner's"
        f" fleet for {s.rps:,.0f} req/s"
    )
    after = f"back to the autoscaler's floor of {s.idle_replicas}, 10 min after the sale"
    return [
        account,
        role,
        binding,
        _scale_job(f"{GATEWAY}-prescale", s, s.gateway_replicas, up, before),
        _scale_job(f"{GATEWAY}-postscale", s, s.idle_replicas, down, after),
    ]


def writer(s: Sizing) -> list[Doc]:
    container = _container(
        "writer",
        s,
        ["python", "-m", "writer"],
        ports=[{"name": "metrics", "containerPort": WRITER_METRICS_PORT}],
        livenessProbe={"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 10},
        resources={"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
    )
    # The last batch is finished and committed on SIGTERM.
    pod = {"terminationGracePeriodSeconds": 30, "containers": [container]}
    annotations = _pod_annotations(WRITER_METRICS_PORT)
    return [_deployment("flashsale-writer", "writer", s.writers, pod, annotations)]


def jobs(s: Sizing) -> list[Doc]:
    small = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    expiry = {
        "containers": [
            _container("expiry", s, ["python", "-m", "flashsale", "expiry"], resources=small)
        ]
    }
    every = ["python", "-m", "flashsale", "reconcile", "--every", str(RECONCILE_EVERY_S)]
    reconcile = {
        "containers": [
            _container(
                "reconcile",
                s,
                every,
                ports=[{"name": "metrics", "containerPort": RECONCILE_METRICS_PORT}],
                resources=small,
            )
        ],
    }
    migrate = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta("flashsale-migrate", "migrate"),
        "spec": {
            "backoffLimit": 3,
            "template": {
                "spec": {
                    "restartPolicy": "OnFailure",
                    "containers": [
                        _container(
                            "migrate", s, ["python", "-m", "flashsale", "migrate"], resources=small
                        )
                    ],
                }
            },
        },
    }
    # Promotes a Redis replica the moment its primary's port refuses connections (its
    # probes must reach the Redis nodes directly, as the gateways do).
    failover_argv = ["python", "-m", "flashsale", "failover-watch"]
    failover = {"containers": [_container("failover-watch", s, failover_argv, resources=small)]}
    one = {"strategy": {"type": "Recreate"}}  # one at a time: a round per interval, not two
    return [
        _deployment("flashsale-expiry", "expiry", 1, expiry, **one),
        _deployment(
            "flashsale-reconcile",
            "reconcile",
            1,
            reconcile,
            _pod_annotations(RECONCILE_METRICS_PORT),
            **one,
        ),
        _deployment("flashsale-failover-watch", "failover-watch", 1, failover, **one),
        migrate,
    ]
