"""The Kubernetes manifests: deploy/k8s/ and what the planner's ``--emit k8s DIR`` writes validate
offline against the Kubernetes schemas (kubernetes-validate, strict: no unknown field; the
Prometheus Operator's two kinds against tests/deploy/crd_schemas.py), deploy/k8s/ is what its
sizing.json renders to, and the planner's fleet is what the manifests ask for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # kubernetes-validate's own validator
import kubernetes_validate
import pytest
import yaml

from kernel.settings import PROJECT_ROOT, Settings
from loadtest.capacity import k8s, plan
from loadtest.capacity.manifests import aligned_writers
from tests.deploy.crd_schemas import BY_KIND
from tests.loadtest.test_planner import _results, write_sections  # made-up stored runs

DEPLOY = PROJECT_ROOT / "deploy" / "k8s"
K8S_VERSION = "1.33.0"  # the oldest Kubernetes the manifests are checked against: CronJob timeZone


def _docs(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every manifest file's objects (the kustomization is kustomize's, not the API's)."""
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(directory.glob("*.yaml"))
        if path.name != "kustomization.yaml"
    }


def _validate(directory: Path) -> list[str]:
    kinds = []
    for name, docs in _docs(directory).items():
        for doc in docs:
            kinds.append(doc["kind"])
            if doc["kind"] in BY_KIND:  # a CRD's: our schema of it
                jsonschema.validate(doc, BY_KIND[doc["kind"]])
                continue
            for version in (K8S_VERSION, kubernetes_validate.utils.latest_version()):
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as error:
                    pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {error.message}")
    return kinds


def _by_kind(directory: Path, kind: str, name: str) -> dict[str, Any]:
    for docs in _docs(directory).values():
        for doc in docs:
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
    raise AssertionError(f"no {kind} {name}")


def test_the_repositorys_manifests_validate_against_the_kubernetes_schemas() -> None:
    kinds = _validate(DEPLOY)
    for kind in (
        "Namespace", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler", "CronJob",
        "Job", "NetworkPolicy", "Service", "ConfigMap",
    ):  # fmt: skip
        assert kind in kinds
    assert "Secret" not in kinds  # referenced, never in the repository


def test_the_repositorys_manifests_are_what_their_sizing_renders() -> None:
    rendered = k8s.render(k8s.load(DEPLOY))
    on_disk = {p.name: p.read_text() for p in DEPLOY.iterdir() if p.name in rendered}
    assert on_disk == rendered, "deploy/k8s/ is stale: python -m loadtest.capacity.k8s deploy/k8s"
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(_docs(DEPLOY))
    assert set(_docs(DEPLOY)) <= set(k8s.FILES)  # no file left over from an older rendering


def test_no_secret_value_is_rendered() -> None:
    local = Settings()  # the local stack's public development secrets
    text = "".join(p.read_text() for p in DEPLOY.iterdir() if p.is_file())
    for secret in (local.jwt_secret, local.admin_token, local.service_token, local.pg_dsn):
        assert secret not in text
    for docs in _docs(DEPLOY).values():
        for doc in docs:
            if doc["kind"] == "ConfigMap":
                assert not {"FLASHSALE_JWT_SECRET", "FLASHSALE_PG_DSN"} & set(doc["data"])


def test_writers_split_the_partitions_evenly() -> None:
    assert aligned_writers(1, 12) == 1
    assert aligned_writers(5, 12) == 6
    assert aligned_writers(7, 12) == 12
    assert aligned_writers(12, 12) == 12


def test_the_planner_emits_valid_manifests_sized_from_its_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write_sections(_results(), tmp_path / "sections")
    out = tmp_path / "k8s"
    plan.main(
        [
            "--rps=200000",
            f"--results={results}",
            "--emit",
            "k8s",
            str(out),
            "--sale-start=2026-12-12T10:00:00Z",
            "--sale-end=2026-12-12T11:00:00Z",
            "--image=registry.example/flashsale:1.2.3",
        ]
    )
    printed = capsys.readouterr().out
    processes = int(printed.split("gateway processes (= cores)")[1].split()[0].replace(",", ""))
    _validate(out)
    sized = k8s.load(out)
    assert sized.gateway_replicas == processes
    # The pre-scale: the planner's fleet 10 minutes before the sale, the floor first.
    prescale = _by_kind(out, "CronJob", "flashsale-gateway-prescale")
    assert prescale["spec"]["schedule"] == "50 9 12 12 *"
    assert prescale["spec"]["suspend"] is False
    job = prescale["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert f"--replicas={processes}" in job["containers"][0]["args"]
    assert json.loads(job["initContainers"][0]["args"][-1]) == {"spec": {"minReplicas": processes}}
    assert _by_kind(out, "CronJob", "flashsale-gateway-postscale")["spec"]["schedule"] == (
        "10 11 12 12 *"
    )
    # The autoscaler targets the planned utilisation of the core each pod requests.
    hpa = _by_kind(out, "HorizontalPodAutoscaler", "flashsale-gateway")["spec"]
    target = hpa["metrics"][0]["resource"]["target"]["averageUtilization"]
    assert target == round(sized.utilisation * 100)
    assert hpa["maxReplicas"] >= processes
    gateway = _by_kind(out, "Deployment", "flashsale-gateway")["spec"]["template"]
    container = gateway["spec"]["containers"][0]
    assert container["image"] == "registry.example/flashsale:1.2.3"
    assert container["resources"]["requests"]["cpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    cpu_us = float(gateway["metadata"]["annotations"]["capacity.flashsale/cpu-us-per-request"])
    # Planned busy share of a pod's core = its requests/s × CPU per request.
    assert sized.rps_per_pod * cpu_us / 1e6 == pytest.approx(sized.utilisation, abs=0.01)
    pdb = _by_kind(out, "PodDisruptionBudget", "flashsale-gateway")["spec"]
    assert 1 <= pdb["maxUnavailable"] < processes
    writers = _by_kind(out, "Deployment", "flashsale-writer")["spec"]["replicas"]
    assert sized.orders_partitions % writers == 0
