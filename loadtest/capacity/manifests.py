"""The Kubernetes objects of a fleet (loadtest/capacity/k8s.py renders them to YAML): the gateway
(Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler, and a CronJob that scales it
up before the sale, since autoscaling reacts too slowly for a two-second spike, and one that lets
it down after), the writers, the jobs, the configuration; the balancer tier is
loadtest/capacity/edge.py's, the namespace, NetworkPolicies and monitoring
loadtest/capacity/policies.py's. Every pod is loadtest/capacity/pods.py's hardened one. Redis
Cluster, Kafka and PostgreSQL are external services: their addresses are configuration,
PostgreSQL's DSN a secret."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from loadtest.capacity.pods import TMP, Doc, budget, deployment, meta, pod
from loadtest.capacity.pods import labels as pod_labels

CONFIG = "flashsale-config"
SECRETS = "flashsale-secrets"  # not in the repository: deploy/k8s/README.md lists its keys
GATEWAY = "flashsale-gateway"
SCALER = "flashsale-scaler"
GATEWAY_PORT, WRITER_METRICS_PORT, RECONCILE_METRICS_PORT = 8088, 9108, 9109
RECONCILE_EVERY_S = 10
PLANNED = "capacity.flashsale/"  # annotation prefix: what the planner sized from
MIGRATE_TTL_S = 86400  # a finished migrate Job goes a day later; applying it again re-runs it
# The image the repository's Containerfile builds: flashsale:<the package's version>.
IMAGE = "flashsale:" + importlib.metadata.version("flashsale-gateway")


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
    # Of the offered requests, the share that reaches the gateways: 1 without a balancer tier,
    # the reserve share with one (the balancers answer sold out from their table).
    forwarded_share: float = 1.0
    balancer_cores: int = 0  # the planner's balancer tier; 0: its costs never measured
    image: str = IMAGE
    haproxy_image: str = "docker.io/library/haproxy:2.6"  # built with Lua, as the edge needs
    balancer_cores_per_pod: int = 2  # haproxy threads per balancer pod
    namespace: str = "flashsale"  # the balancers find the gateways by its DNS name
    pod_cidr: str = "10.0.0.0/8"  # the gateways believe X-Forwarded-For from these peers only
    pg_port: int = 5432  # egress is open to the stack's ports only: Redis's, Kafka's, this
    monitoring: bool = False  # ServiceMonitor and PrometheusRule (the Prometheus Operator's)
    monitoring_namespace: str = "monitoring"  # where Prometheus runs: its scrapes may come in
    kubectl_image: str = "registry.k8s.io/kubectl:v1.33.0"
    redis_nodes: str = "redis-cluster:6379"
    kafka_bootstrap: str = "kafka:9092"
    idle_replicas: int = 2  # the autoscaler's floor outside a sale
    sale_start: str = ""  # ISO 8601 in UTC; empty: the pre-scale is rendered suspended
    sale_end: str = ""
    prescale_lead_min: int = 10

    @property
    def rps_per_pod(self) -> float:
        return self.rps * self.forwarded_share / self.gateway_replicas

    @property
    def max_replicas(self) -> int:
        """The autoscaler's ceiling: twice the plan (also the balancers' server slots)."""
        return 2 * max(self.gateway_replicas, self.idle_replicas)

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


def _container(name: str, s: Sizing, args: list[str], **extra: Any) -> Doc:
    """A container of the project's image; ``args`` after its ``flashsale`` command line."""
    return {
        "name": name,
        "image": s.image,
        "command": ["flashsale", *args],
        "envFrom": [{"configMapRef": {"name": CONFIG}}, {"secretRef": {"name": SECRETS}}],
        **extra,
    }


def _pod_annotations(port: int) -> Doc:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}


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
        # The root filesystem is read-only: the state directory is in the pod's /tmp emptyDir.
        "FLASHSALE_STATE_DIR": f"{TMP}/flashsale",
        # The balancers' pods; nothing else in the cluster reaches a gateway (NetworkPolicy).
        "FLASHSALE_TRUSTED_PROXIES": s.pod_cidr,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(CONFIG, "config"),
        "data": data,
    }


def gateway(s: Sizing) -> list[Doc]:
    http = {"port": "http"}
    probe = {"periodSeconds": 2, "timeoutSeconds": 1}
    container = _container(
        "gateway",
        s,
        ["gateway"],
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
    spec = pod([container], terminationGracePeriodSeconds=30)
    gateways = deployment(
        GATEWAY,
        "gateway",
        None,
        spec,
        annotations,
        strategy={"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {
            "selector": pod_labels("gateway"),
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    return [gateways, service, budget(GATEWAY, "gateway", s.max_unavailable), autoscaler(s)]


def autoscaler(s: Sizing) -> Doc:
    target = {"type": "Utilization", "averageUtilization": round(s.utilisation * 100)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta(GATEWAY, "gateway"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": GATEWAY},
            "minReplicas": s.idle_replicas,
            "maxReplicas": s.max_replicas,
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
    spec = pod(
        [
            {
                "name": "scale",
                **kubectl,
                "args": ["scale", f"deployment/{GATEWAY}", f"--replicas={replicas}"],
            }
        ],
        account=SCALER,
        restartPolicy="OnFailure",
        # The autoscaler's floor first, so it cannot scale the Deployment back down.
        initContainers=[
            {
                "name": "floor",
                **kubectl,
                "args": ["patch", "hpa", GATEWAY, "--type=merge", "-p", patch],
            }
        ],
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(name, "scaler", annotations={PLANNED + "why": why}),
        "spec": {
            "schedule": _cron(when) if when else "0 0 1 1 *",
            "timeZone": "Etc/UTC",
            "suspend": when is None,  # no sale time given: nothing runs until it is set
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 120,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 3,
                    "template": {"metadata": {"labels": pod_labels("scaler")}, "spec": spec},
                }
            },
        },
    }


def _moment(text: str) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC) if text else None


def scaler(s: Sizing) -> list[Doc]:
    start, end = _moment(s.sale_start), _moment(s.sale_end)
    lead = dt.timedelta(minutes=s.prescale_lead_min)
    up = start - lead if start else None
    down = end + dt.timedelta(minutes=10) if end else None
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(SCALER, "scaler")}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(SCALER, "scaler"),
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
        "metadata": meta(SCALER, "scaler"),
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
        ["writer"],
        ports=[{"name": "metrics", "containerPort": WRITER_METRICS_PORT}],
        livenessProbe={"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 10},
        resources={"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
    )
    # The last batch is finished and committed on SIGTERM.
    spec = pod([container], terminationGracePeriodSeconds=30)
    annotations = _pod_annotations(WRITER_METRICS_PORT)
    return [deployment("flashsale-writer", "writer", s.writers, spec, annotations)]


def migrate_name(image: str) -> str:
    """The migrate Job's name, one per image: a Job's pod template cannot change, so a new
    image is a new Job (the old one goes after its TTL). The tag (or digest) readable, a hash
    of the whole reference so two registries' same tag differ."""
    tag = re.split(r"[:@]", image.rsplit("/", 1)[-1], maxsplit=1)[-1]
    readable = re.sub(r"[^a-z0-9]+", "-", tag.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(image.encode()).hexdigest()[:8]
    return f"flashsale-migrate-{readable}-{digest}" if readable else f"flashsale-migrate-{digest}"


def jobs(s: Sizing) -> list[Doc]:
    small = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    expiry = pod([_container("expiry", s, ["expiry"], resources=small)])
    every = ["reconcile", "--every", str(RECONCILE_EVERY_S)]
    reconcile = pod(
        [
            _container(
                "reconcile",
                s,
                every,
                ports=[{"name": "metrics", "containerPort": RECONCILE_METRICS_PORT}],
                resources=small,
            )
        ]
    )
    migrate = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(migrate_name(s.image), "migrate"),
        "spec": {
            "backoffLimit": 3,
            # Gone a day after it finished: applying the same manifests again later creates
            # it again, and migrating twice applies nothing the second time.
            "ttlSecondsAfterFinished": MIGRATE_TTL_S,
            "template": {
                "metadata": {"labels": pod_labels("migrate")},
                "spec": pod(
                    [_container("migrate", s, ["migrate"], resources=small)],
                    restartPolicy="OnFailure",
                ),
            },
        },
    }
    # Promotes a Redis replica the moment its primary's port refuses connections (its
    # probes must reach the Redis nodes directly, as the gateways do).
    failover = pod([_container("failover-watch", s, ["failover-watch"], resources=small)])
    one = {"strategy": {"type": "Recreate"}}  # one at a time: a round per interval, not two
    return [
        deployment("flashsale-expiry", "expiry", 1, expiry, **one),
        deployment(
            "flashsale-reconcile",
            "reconcile",
            1,
            reconcile,
            _pod_annotations(RECONCILE_METRICS_PORT),
            **one,
        ),
        deployment("flashsale-failover-watch", "failover-watch", 1, failover, **one),
        migrate,
    ]
