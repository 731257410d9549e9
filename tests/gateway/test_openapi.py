"""The published API contract: the kept copy is the generated document, every route the app
serves is in it (and nothing else), and it loads as OpenAPI 3.1.

Regenerate the kept copy with ``.venv/bin/python -m gateway.openapi > docs/openapi.json``."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import schemathesis
from schemathesis.core.result import Err
from starlette.routing import Route

from gateway import app, bodies, openapi
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX, QUEUE_PREFIX, QUEUE_SUFFIX, ungated
from kernel.settings import PROJECT_ROOT, Settings

KEPT = PROJECT_ROOT / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m gateway.openapi > docs/openapi.json"


def test_the_kept_document_is_the_generated_one() -> None:
    assert KEPT.read_bytes() == openapi.DOCUMENT, f"docs/openapi.json is stale: {REGENERATE}"


def test_one_command_regenerates_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.openapi"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == openapi.DOCUMENT


def test_every_route_is_documented_and_nothing_else() -> None:
    front = app.build_app(Settings(env="local"))
    served = {
        (method.lower(), route.path)
        for route in front.inner.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"  # Starlette's implicit HEAD of each GET
    }
    # The front's own routes (gateway/front.py): the purchase and a queue's poll.
    served.add(("post", f"{PURCHASE_PREFIX}{{item_id}}{PURCHASE_SUFFIX}"))
    served.add(("get", f"{QUEUE_PREFIX}{{sale_id}}{QUEUE_SUFFIX}"))
    documented = {(op.method, op.path) for op in openapi.OPERATIONS}
    assert served == documented


def test_the_document_says_what_admission_skips() -> None:
    document = json.loads(openapi.DOCUMENT)
    for path, methods in document["paths"].items():
        for spec in methods.values():
            shed = "OVERLOADED" in spec["responses"].get("503", {}).get("description", "")
            assert shed == (not ungated(path)), path


def test_it_loads_as_openapi_3_1() -> None:
    document = json.loads(openapi.DOCUMENT)
    assert document["openapi"] == "3.1.0"
    results = list(schemathesis.openapi.from_dict(document).get_all_operations())
    assert [r.err() for r in results if isinstance(r, Err)] == []
    assert len(results) == len(openapi.OPERATIONS)


def test_each_refusal_lists_its_codes_and_says_when_to_retry() -> None:
    document = json.loads(openapi.DOCUMENT)
    for path, methods in document["paths"].items():
        for method, spec in methods.items():
            for status, answer in spec["responses"].items():
                if int(status) < 400:
                    continue
                codes = answer["content"]["application/json"]["schema"]["properties"]
                assert codes["error"]["enum"], (method, path, status)
                if status in ("429", "503"):
                    assert "Retry-After" in answer["headers"], (method, path, status)


def test_the_schemas_are_the_handlers_types() -> None:
    """The document's body schemas are msgspec's for the very types (one source of truth)."""
    document = json.loads(openapi.DOCUMENT)
    _, components = msgspec.json.schema_components(
        [bodies.Error, bodies.OrderAccepted], ref_template="#/components/schemas/{name}"
    )
    for name, schema in components.items():
        assert document["components"]["schemas"][name] == schema
    purchase = document["paths"][f"{PURCHASE_PREFIX}{{item_id}}{PURCHASE_SUFFIX}"]["post"]
    accepted = purchase["responses"]["202"]["content"]["application/json"]["schema"]
    assert accepted == {"$ref": "#/components/schemas/OrderAccepted"}
