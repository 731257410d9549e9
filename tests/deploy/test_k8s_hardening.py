"""The rendered manifests' hardening: every pod passes Pod Security "restricted"
(tests/deploy/pod_security.py), spreads over zones and hosts, talks only where a NetworkPolicy
lets it; the migrate Job can be applied again with a new image; the balancer tier is the
planner's, with a haproxy configuration haproxy itself accepts; the monitoring objects come
only when asked for, and validate against their schemas."""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.settings import PROJECT_ROOT
from loadtest.capacity import edge, k8s, plan
from loadtest.capacity.manifests import CONFIG, GATEWAY_PORT, SECRETS, migrate_name
from tests.deploy import pod_security
from tests.deploy.test_k8s import _by_kind, _docs, _validate
from tests.loadtest.test_planner import _balancer_section, _results, write_sections

DEPLOY = PROJECT_ROOT / "deploy" / "k8s"
Doc = dict[str, Any]


def _all(directory: Path) -> list[Doc]:
    return [doc for docs in _docs(directory).values() for doc in docs]


def _pods(directory: Path) -> dict[str, Doc]:
    found = {}
    for doc in _all(directory):
        spec = pod_security.pod_spec(doc)
        if spec is not None:
            found[f"{doc['kind']} {doc['metadata']['name']}"] = spec
    return found


def _emit(tmp_path: Path, *extra: str, balancer: bool = False) -> Path:
    results = _results()
    if balancer:
        results["sections"]["balancer"] = _balancer_section()
    path = write_sections(results, tmp_path / "sections")
    out = tmp_path / "k8s"
    plan.main(["--rps=200000", f"--results={path}", "--emit", "k8s", str(out), *extra])
    return out


def test_every_pod_passes_the_restricted_profile() -> None:
    pods = _pods(DEPLOY)
    assert len(pods) >= 9  # gateway, balancer, writer, 3 jobs, migrate, 2 scaler CronJobs
    broken = {name: pod_security.violations(spec) for name, spec in pods.items()}
    assert {name: v for name, v in broken.items() if v} == {}
    namespace = _by_kind(DEPLOY, "Namespace", "flashsale")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize(
    ("rule", "breach"),
    [
        ("host_namespaces", lambda s: s.update(hostNetwork=True)),
        ("privileged", lambda s: s["containers"][0]["securityContext"].update(privileged=True)),
        ("host_path", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
        ("host_ports", lambda s: s["containers"][0]["ports"][0].update(hostPort=80)),
        ("volume_types", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x"}})),
        (
            "privilege_escalation",
            lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        ),
        (
            "non_root",
            lambda s: s["containers"][0]["securityContext"].update(runAsNonRoot=False),
        ),
        ("non_root_user", lambda s: s["securityContext"].update(runAsUser=0)),
        (
            "seccomp",
            lambda s: s["containers"][0]["securityContext"].update(
                seccompProfile={"type": "Unconfined"}
            ),
        ),
        (
            "capabilities",
            lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
                add=["NET_ADMIN"]
            ),
        ),
        ("sysctls", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax"}])),
    ],
)
def test_the_checker_finds_each_breach(rule: str, breach: Any) -> None:
    spec = copy.deepcopy(_pods(DEPLOY)["Deployment flashsale-gateway"])
    breach(spec)
    assert any(v.startswith(f"{rule}:") for v in pod_security.violations(spec))


def test_a_pod_without_any_security_context_breaks_the_profile() -> None:
    """What every pod of the manifests looked like before they were hardened."""
    bare = {"containers": [{"name": "gateway", "image": "flashsale:0"}]}
    rules = {v.split(":")[0] for v in pod_security.violations(bare)}
    assert rules == {"privilege_escalation", "non_root", "seccomp", "capabilities"}


def test_every_deployment_spreads_over_zones_and_hosts() -> None:
    for doc in _all(DEPLOY):
        if doc["kind"] != "Deployment":
            continue
        template = doc["spec"]["template"]
        spread = {c["topologyKey"]: c for c in template["spec"]["topologySpreadConstraints"]}
        assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
        for constraint in spread.values():
            assert constraint["labelSelector"]["matchLabels"] == template["metadata"]["labels"]


def test_every_container_runs_the_projects_image_and_cli() -> None:
    image = "flashsale:" + importlib.metadata.version("flashsale-gateway")
    seen = set()
    for spec in _pods(DEPLOY).values():
        for c in pod_security.containers(spec):
            if c["image"] == image:
                seen.add(c["command"][0])
                assert c["command"][:1] == ["flashsale"] or c["command"][:3] == [
                    "python", "-m", "flashsale.fleet.agent",
                ]  # fmt: skip
    assert seen == {"flashsale", "python"}


def _matches(selector: Doc, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


def _allowed(
    policies: list[Doc], way: str, pod: dict[str, str], peer: dict[str, str], port: int
) -> bool:
    """NetworkPolicy semantics for one direction: selected by none, anything goes; else some
    selecting policy must have a rule whose peers and ports admit ``peer`` on ``port``."""
    selecting = [
        p
        for p in policies
        if way.capitalize() in p["spec"]["policyTypes"] and _matches(p["spec"]["podSelector"], pod)
    ]
    if not selecting:
        return True
    peers_key = "from" if way == "ingress" else "to"
    for policy in selecting:
        for rule in policy["spec"].get(way, []):
            peers = rule.get(peers_key)
            peer_ok = peers is None or any(
                "podSelector" in p
                and "namespaceSelector" not in p
                and _matches(p["podSelector"], peer)
                for p in peers
            )
            ports = rule.get("ports")
            if peer_ok and (ports is None or any(p["port"] == port for p in ports)):
                return True
    return False


def test_network_policies_let_through_only_the_tiers_paths() -> None:
    policies = [d for d in _all(DEPLOY) if d["kind"] == "NetworkPolicy"]

    def pod(component: str) -> dict[str, str]:
        return {"app.kubernetes.io/name": "flashsale", "app.kubernetes.io/component": component}

    def path(src: str, dst: str, port: int) -> bool:
        out = _allowed(policies, "egress", pod(src), pod(dst), port)
        return out and _allowed(policies, "ingress", pod(dst), pod(src), port)

    assert path("balancer", "gateway", GATEWAY_PORT)
    assert not path("writer", "gateway", GATEWAY_PORT)  # nothing but the balancers reach them
    assert not path("gateway", "writer", 9108)
    assert _allowed(policies, "ingress", pod("balancer"), {}, edge.EDGE_PORT)  # the internet
    assert not _allowed(policies, "ingress", pod("gateway"), {}, GATEWAY_PORT)
    # Out to the stack: its ports only; the scaler to the API server only.
    assert _allowed(policies, "egress", pod("gateway"), {}, 6379)
    assert _allowed(policies, "egress", pod("writer"), {}, 9092)
    assert _allowed(policies, "egress", pod("migrate"), {}, 5432)
    assert _allowed(policies, "egress", pod("balancer"), {}, 6379)  # its sold-out agent
    assert not _allowed(policies, "egress", pod("gateway"), {}, 22)
    assert _allowed(policies, "egress", pod("scaler"), {}, 443)
    assert not _allowed(policies, "egress", pod("scaler"), {}, 6379)


def test_the_migrate_job_is_one_per_image_and_goes_after_it_finished() -> None:
    jobs = [d for d in _all(DEPLOY) if d["kind"] == "Job"]
    assert len(jobs) == 1
    job = jobs[0]
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert job["metadata"]["name"] == migrate_name(image)
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    names = {
        migrate_name(i) for i in ("flashsale:0.1.0", "flashsale:0.2.0", "r.example/flashsale:0.1.0")
    }
    assert len(names) == 3  # a new image (or registry) is a new Job, not an immutable-field error
    digest = migrate_name("r.example/flashsale@sha256:" + "ab" * 32)
    for name in (*names, digest):
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 52, name


def test_the_balancer_tier_is_the_planners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _emit(tmp_path, balancer=True)
    printed = capsys.readouterr().out
    cores = int(printed.split("with a balancer tier: balancer cores")[1].split()[0])
    behind = int(printed.split("    gateway processes (= cores)")[1].split()[0])
    _validate(out)
    sized = k8s.load(out)
    assert (sized.balancer_cores, sized.gateway_replicas) == (cores, behind)
    balancers = _by_kind(out, "Deployment", edge.BALANCER)["spec"]
    haproxy, agent = balancers["template"]["spec"]["containers"]
    per_pod = int(haproxy["resources"]["requests"]["cpu"])
    assert balancers["replicas"] * per_pod >= cores > (balancers["replicas"] - 1) * per_pod
    assert agent["command"][-2] == edge.SOCKET  # on the socket haproxy opens, in a shared volume
    assert _by_kind(out, "Service", edge.BALANCER)["spec"]["type"] == "LoadBalancer"
    # The gateways see the reserve share only; the autoscaler targets what that costs them.
    gateway = _by_kind(out, "Deployment", "flashsale-gateway")["spec"]["template"]
    cpu_us = float(gateway["metadata"]["annotations"]["capacity.flashsale/cpu-us-per-request"])
    assert sized.rps_per_pod == pytest.approx(200000 * 0.02 / behind)
    assert sized.rps_per_pod * cpu_us / 1e6 == pytest.approx(sized.utilisation, abs=0.001)
    assert sized.utilisation <= sized.headroom


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy not installed (bootstrap)")
def test_haproxy_accepts_the_balancers_configuration(tmp_path: Path) -> None:
    config = _by_kind(DEPLOY, "ConfigMap", edge.BALANCER)["data"]
    text = config["haproxy.cfg"]
    assert f"bind :{edge.EDGE_PORT}" in text and "server-template gw " in text
    for name, body in config.items():  # the ConfigMap's mount, here
        body = body.replace(edge.CONFIG_DIR, str(tmp_path)).replace(edge.RUN_DIR, str(tmp_path))
        (tmp_path / name).write_text(body)
    balancers = _by_kind(DEPLOY, "Deployment", edge.BALANCER)["spec"]["template"]["spec"]
    haproxy = balancers["containers"][0]
    # Its buyer-token key comes from the Secret (its value here a stand-in), not the ConfigMap.
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in haproxy["env"] if "valueFrom" in e}
    assert refs == {"FLASHSALE_JWT_SECRET": {"name": SECRETS, "key": "FLASHSALE_JWT_SECRET"}}
    assert "FLASHSALE_JWT_SECRET" not in _by_kind(DEPLOY, "ConfigMap", CONFIG)["data"]

    def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={k: v for k, v in os.environ.items() if k not in refs} | env,
        )

    checked = check({name: "s" * 64 for name in refs})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Without its key it refuses to start: an empty HMAC key verifies tokens anyone signs.
    refused = check({})
    assert refused.returncode != 0 and "FLASHSALE_JWT_SECRET" in refused.stderr, refused.stderr


def test_a_template_without_what_the_cluster_changes_is_refused() -> None:
    sized = k8s.load(DEPLOY)
    with pytest.raises(ValueError, match="no longer has one"):
        edge._swap("global\n", "bind 127.0.0.1:8080", "bind :8080")
    assert (
        edge.haproxy_config(dataclasses.replace(sized, balancer_cores_per_pod=4)).count(
            "nbthread 4"
        )
        == 1
    )


def test_monitoring_objects_only_when_asked_for(tmp_path: Path) -> None:
    assert not (DEPLOY / "monitoring.yaml").exists()
    out = _emit(tmp_path, "--monitoring")
    kinds = _validate(out)  # ServiceMonitor and PrometheusRule against crd_schemas.py
    assert {"ServiceMonitor", "PrometheusRule"} <= set(kinds)
    rules = _by_kind(out, "PrometheusRule", "flashsale")["spec"]["groups"]
    on_disk = [yaml.safe_load(p.read_text()) for p in sorted(_rule_files())]
    assert rules == [g for doc in on_disk for g in doc["groups"]]
    listed = yaml.safe_load((out / "kustomization.yaml").read_text())["resources"]
    assert "monitoring.yaml" in listed


def _rule_files() -> list[Path]:
    return list((PROJECT_ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
