"""The pieces every workload in loadtest/capacity/manifests.py is built from: labels, the hardened
pod (Pod Security "restricted": non-root, no privilege escalation, every capability dropped,
seccomp RuntimeDefault, a read-only root filesystem), spreading over zones and hosts.

A read-only root needs a writable place for what the processes write: measured, the gateway,
writer, expiry and reconcile loops run and answer with ``/`` read-only and only ``/tmp``
writable (nothing of theirs writes files; Python's and the libraries' temporary files go to
``/tmp``, and ``HOME`` points there so ``Path.home()`` and ``$XDG_STATE_HOME`` resolve to it)."""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
APP = "flashsale"
# The image's user is whatever it says; the pods run as this one regardless (numeric, so the
# kubelet can check runAsNonRoot without reading the image's /etc/passwd).
UID = 10001
TMP = "/tmp"  # noqa: S108 - an emptyDir of the pod's own, not the node's /tmp
TMP_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}
TMP_MOUNT = {"name": "tmp", "mountPath": TMP}


def labels(component: str) -> Doc:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component}


def meta(name: str, component: str, **extra: Any) -> Doc:
    return {"name": name, "labels": labels(component), **extra}


def container_security() -> Doc:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def harden(container: Doc) -> Doc:
    """``container`` with the restricted security context and a writable ``/tmp``."""
    env = [
        {"name": "HOME", "value": TMP},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},  # no .pyc beside the code
        *container.get("env", []),
    ]
    mounts = [TMP_MOUNT, *container.get("volumeMounts", [])]
    return {
        **container,
        "env": env,
        "volumeMounts": mounts,
        "securityContext": container_security(),
    }


def pod(
    containers: list[Doc],
    *,
    volumes: tuple[Doc, ...] = (),
    account: str | None = None,
    **spec: Any,
) -> Doc:
    """A pod spec: hardened containers, the /tmp emptyDir, and no API token unless ``account``
    (a ServiceAccount that needs one) is given."""
    init = spec.pop("initContainers", None)
    return {
        **({"serviceAccountName": account} if account else {}),
        "automountServiceAccountToken": account is not None,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **({"initContainers": [harden(c) for c in init]} if init else {}),
        "containers": [harden(c) for c in containers],
        "volumes": [TMP_VOLUME, *volumes],
        **spec,
    }


def spread(component: str) -> list[Doc]:
    """Over zones as evenly as the cluster allows (soft: a one-zone cluster, or nodes without
    zone labels, still schedule), over hosts strictly (one host's loss costs at most one pod
    more than its share). Per rollout revision (pod-template-hash), so a rolling update's new
    pods spread among themselves rather than around the old ones."""
    selector = {"matchLabels": labels(component)}
    per_revision = {"matchLabelKeys": ["pod-template-hash"]}
    return [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": selector,
            **per_revision,
        },
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
            **per_revision,
        },
    ]


def deployment(
    name: str,
    component: str,
    replicas: int | None,
    spec: Doc,
    annotations: Doc | None = None,
    **extra: Any,
) -> Doc:
    """``replicas`` None: the autoscaler's to set (an apply must not reset it)."""
    template = {
        "labels": labels(component),
        **({"annotations": annotations} if annotations else {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, component),
        "spec": {
            **({} if replicas is None else {"replicas": replicas}),
            "selector": {"matchLabels": labels(component)},
            "template": {
                "metadata": template,
                "spec": {**spec, "topologySpreadConstraints": spread(component)},
            },
            **extra,
        },
    }


def budget(name: str, component: str, max_unavailable: int) -> Doc:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(name, component),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": labels(component)},
        },
    }
