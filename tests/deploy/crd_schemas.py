"""Schemas for the two Prometheus Operator kinds the manifests render behind ``--monitoring``
(they are CRDs: not in the Kubernetes schemas kubernetes-validate has). Written from the
operator's API reference (monitoring.coreos.com/v1), for the fields the manifests use and the
ones next to them; every object closed (no unknown field), as kubernetes-validate's strict mode
is for the core kinds."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def _closed(required: list[str], **properties: Schema) -> Schema:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


_STRING: Schema = {"type": "string"}
_DURATION: Schema = {"type": "string", "pattern": r"^(0|(([0-9]+)(y|w|d|h|m|s|ms))+)$"}
_LABELS: Schema = {"type": "object", "additionalProperties": _STRING}
_SELECTOR = _closed(
    [],
    matchLabels=_LABELS,
    matchExpressions={
        "type": "array",
        "items": _closed(
            ["key", "operator"],
            key=_STRING,
            operator={"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            values={"type": "array", "items": _STRING},
        ),
    },
)
_METADATA: Schema = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STRING, "namespace": _STRING, "labels": _LABELS},
}


def _kind(kind: str, spec: Schema) -> Schema:
    return _closed(
        ["apiVersion", "kind", "metadata", "spec"],
        apiVersion={"const": "monitoring.coreos.com/v1"},
        kind={"const": kind},
        metadata=_METADATA,
        spec=spec,
    )


SERVICE_MONITOR = _kind(
    "ServiceMonitor",
    _closed(
        ["selector", "endpoints"],
        selector=_SELECTOR,
        namespaceSelector=_closed(
            [], any={"type": "boolean"}, matchNames={"type": "array", "items": _STRING}
        ),
        jobLabel=_STRING,
        endpoints={
            "type": "array",
            "minItems": 1,
            "items": _closed(
                [],
                port=_STRING,
                targetPort={"type": ["string", "integer"]},
                path=_STRING,
                scheme={"enum": ["http", "https"]},
                interval=_DURATION,
                scrapeTimeout=_DURATION,
                honorLabels={"type": "boolean"},
            ),
        },
    ),
)

_RULE: Schema = {
    "type": "object",
    "properties": {
        "record": _STRING,
        "alert": _STRING,
        "expr": {"type": ["string", "integer"]},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": _LABELS,
        "annotations": _LABELS,
    },
    "required": ["expr"],
    "additionalProperties": False,
    # One of a recording rule's name or an alert's, never both.
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
}

PROMETHEUS_RULE = _kind(
    "PrometheusRule",
    _closed(
        ["groups"],
        groups={
            "type": "array",
            "items": _closed(
                ["name", "rules"],
                name=_STRING,
                interval=_DURATION,
                limit={"type": "integer"},
                rules={"type": "array", "items": _RULE},
            ),
        },
    ),
)

BY_KIND = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}
