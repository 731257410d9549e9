"""The Pod Security Standards' "restricted" profile as a checker of pod specs: every control of
the documented list (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
Baseline's controls and Restricted's on top, as of Kubernetes 1.33), each a function that
returns what breaks it. No library does this offline in Python; the cluster's own admission
(the namespace's ``pod-security.kubernetes.io/enforce: restricted`` label) is the authority,
this the same rules before anything is applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Spec = dict[str, Any]

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def containers(spec: Spec) -> Iterator[Spec]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key, [])


def _ctx(c: Spec) -> Spec:
    return dict(c.get("securityContext") or {})


# Baseline.
def host_process(spec: Spec) -> list[str]:
    scopes = [spec.get("securityContext") or {}, *map(_ctx, containers(spec))]
    return ["windowsOptions.hostProcess"] * any(
        (s.get("windowsOptions") or {}).get("hostProcess") for s in scopes
    )


def host_namespaces(spec: Spec) -> list[str]:
    return [f for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]


def privileged(spec: Spec) -> list[str]:
    return [f"{c['name']}: privileged" for c in containers(spec) if _ctx(c).get("privileged")]


def baseline_capabilities(spec: Spec) -> list[str]:
    return [
        f"{c['name']}: adds {cap}"
        for c in containers(spec)
        for cap in (_ctx(c).get("capabilities") or {}).get("add", [])
        if cap not in BASELINE_CAPABILITIES
    ]


def host_path(spec: Spec) -> list[str]:
    return [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]


def host_ports(spec: Spec) -> list[str]:
    return [
        f"{c['name']}: hostPort {p['hostPort']}"
        for c in containers(spec)
        for p in c.get("ports", [])
        if p.get("hostPort")
    ]


def _profiles(spec: Spec, field: str) -> Iterator[tuple[str, Spec]]:
    """``field`` (seccompProfile, appArmorProfile) of the pod and of each container."""
    pod = (spec.get("securityContext") or {}).get(field)
    if pod is not None:
        yield "pod", pod
    for c in containers(spec):
        found = _ctx(c).get(field)
        if found is not None:
            yield c["name"], found


def apparmor(spec: Spec) -> list[str]:
    return [
        f"{where}: AppArmor {p.get('type')}"
        for where, p in _profiles(spec, "appArmorProfile")
        if p.get("type") not in ("RuntimeDefault", "Localhost")
    ]


def selinux(spec: Spec) -> list[str]:
    scopes = [("pod", spec.get("securityContext") or {})]
    scopes += [(c["name"], _ctx(c)) for c in containers(spec)]
    wrong = []
    for where, ctx in scopes:
        options = ctx.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or "user" in options or "role" in options:
            wrong.append(f"{where}: seLinuxOptions {options}")
    return wrong


def proc_mount(spec: Spec) -> list[str]:
    return [
        f"{c['name']}: procMount {_ctx(c)['procMount']}"
        for c in containers(spec)
        if _ctx(c).get("procMount", "Default") != "Default"
    ]


def sysctls(spec: Spec) -> list[str]:
    found = (spec.get("securityContext") or {}).get("sysctls", [])
    return [f"sysctl {s['name']}" for s in found if s["name"] not in SAFE_SYSCTLS]


# Restricted.
def volume_types(spec: Spec) -> list[str]:
    return [
        f"volume {v['name']}: {kind}"
        for v in spec.get("volumes", [])
        for kind in set(v) - {"name"}
        if kind not in RESTRICTED_VOLUMES
    ]


def privilege_escalation(spec: Spec) -> list[str]:
    return [
        f"{c['name']}: allowPrivilegeEscalation not false"
        for c in containers(spec)
        if _ctx(c).get("allowPrivilegeEscalation") is not False
    ]


def non_root(spec: Spec) -> list[str]:
    """runAsNonRoot true on the pod (no container saying false) or on every container."""
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot") is True
    return [
        f"{c['name']}: runAsNonRoot not true"
        for c in containers(spec)
        if _ctx(c).get("runAsNonRoot") is False or (not pod and _ctx(c).get("runAsNonRoot") is None)
    ]


def non_root_user(spec: Spec) -> list[str]:
    scopes = [("pod", spec.get("securityContext") or {})]
    scopes += [(c["name"], _ctx(c)) for c in containers(spec)]
    return [f"{where}: runAsUser 0" for where, ctx in scopes if ctx.get("runAsUser") == 0]


def seccomp(spec: Spec) -> list[str]:
    """RuntimeDefault or Localhost on the pod, or on every container; never Unconfined."""
    found = dict(_profiles(spec, "seccompProfile"))
    wrong = [
        f"{where}: seccomp {p.get('type')}"
        for where, p in found.items()
        if p.get("type") not in ("RuntimeDefault", "Localhost")
    ]
    if "pod" not in found:
        wrong += [
            f"{c['name']}: no seccompProfile" for c in containers(spec) if c["name"] not in found
        ]
    return wrong


def capabilities(spec: Spec) -> list[str]:
    wrong = []
    for c in containers(spec):
        caps = _ctx(c).get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            wrong.append(f"{c['name']}: does not drop ALL")
        wrong += [f"{c['name']}: adds {a}" for a in caps.get("add", []) if a != "NET_BIND_SERVICE"]
    return wrong


RESTRICTED: tuple[Callable[[Spec], list[str]], ...] = (
    host_process, host_namespaces, privileged, baseline_capabilities, host_path, host_ports,
    apparmor, selinux, proc_mount, sysctls,
    volume_types, privilege_escalation, non_root, non_root_user, seccomp, capabilities,
)  # fmt: skip


def violations(spec: Spec) -> list[str]:
    """What in a pod spec the restricted profile forbids, one line per breach; [] if none."""
    return [f"{rule.__name__}: {breach}" for rule in RESTRICTED for breach in rule(spec)]


POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def pod_spec(doc: dict[str, Any]) -> Spec | None:
    """The pod spec an object runs, or None for a kind that runs none."""
    path = POD_TEMPLATES.get(doc["kind"])
    if path is None:
        return None
    found: Any = doc
    for key in path:
        found = found[key]
    return dict(found)
