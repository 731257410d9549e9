"""The error tree (gateway/errors.py) is the one list of what the API can answer: its docstring
draws every class with its status and codes, every code the gateway's code raises is declared by
the class it raises, and a client finds every declared code in docs/openapi.json or the README.
No servers: the classes, the source text and the two documents."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import gateway
from domain.errors import NotReady
from gateway import errors
from gateway.admission import OVERLOADED_BODY, OVERLOADED_START
from gateway.errors import ApiError, Conflict, Overloaded
from kernel.settings import PROJECT_ROOT

GATEWAY = PROJECT_ROOT / "gateway"
_CODE = re.compile(r"\b[A-Z][A-Z_]{2,}\b")


def _tree() -> list[type[ApiError]]:
    found, todo = [], list(ApiError.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def _drawn() -> dict[str, str]:
    """Each class drawn in the docstring → its entry (its line and the ``│ /`` lines under it)."""
    entries: dict[str, str] = {}
    name = None
    for line in (errors.__doc__ or "").splitlines():
        if match := re.search(r"── (\w+)\s+(.*)", line):
            name = match[1]
            entries[name] = match[2]
        elif name is not None and line.strip(" │").startswith(("/", "(")):
            entries[name] += " " + line.strip(" │")
        else:
            name = None
    return entries


def test_the_docstring_draws_each_class_with_its_status_and_every_code() -> None:
    drawn = _drawn()
    assert set(drawn) == {cls.__name__ for cls in _tree()}
    for cls in _tree():
        entry = drawn[cls.__name__]
        assert entry.startswith(f"{cls.status} "), (cls.__name__, entry)
        assert set(cls.codes) <= set(_CODE.findall(entry)), (cls.__name__, entry)


def test_every_api_error_is_a_class_of_the_tree_module() -> None:
    for module in pkgutil.walk_packages(gateway.__path__, "gateway."):
        if module.name not in ("gateway.__main__", "gateway.asgi"):  # these start a server
            importlib.import_module(module.name)
    assert {cls.__module__ for cls in _tree()} == {"gateway.errors"}


def _raised(path: Path) -> Iterator[tuple[str, str, int]]:
    """(class, code, line) of each literal code given to an error class in ``path``: a call
    ``Cls("CODE")``, a table row ``(Cls, "CODE")`` and a call ``Cls(TABLE[key])`` whose module
    level TABLE is a dict literal of codes."""
    tree = ast.parse(path.read_text(), str(path))
    tables = {
        target.id: [v.value for v in node.value.values if isinstance(v, ast.Constant)]
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    names = {cls.__name__ for cls in _tree()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            cls, arg = node.func.id, node.args[0]
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
            first, arg = node.elts
            cls = first.id if isinstance(first, ast.Name) else ""
        else:
            continue
        if cls not in names:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            yield cls, arg.value, node.lineno
        elif (
            isinstance(arg, ast.Subscript)
            and isinstance(arg.value, ast.Name)
            and arg.value.id in tables
        ):
            for code in tables[arg.value.id]:
                yield cls, str(code), node.lineno


def test_every_code_the_gateway_raises_is_declared_by_its_class() -> None:
    by_name = {cls.__name__: cls for cls in _tree()}
    raised = [
        (f"{path.relative_to(PROJECT_ROOT)}:{line}", cls, code)
        for path in sorted(GATEWAY.rglob("*.py"))
        for cls, code, line in _raised(path)
    ]
    assert len(raised) > 20  # the scan sees the raises (a broken scan would pass vacuously)
    undeclared = [row for row in raised if row[2] not in by_name[row[1]].codes]
    assert undeclared == []
    # What arrives as data: domain's arming refusals (gateway/arming.py) and a cancel's
    # ORDER_<status> (gateway/orders.py; a cancelled order answers 200).
    arming: list[type[NotReady]] = [NotReady, *NotReady.__subclasses__()]
    assert {refusal.code for refusal in arming} <= set(Conflict.codes)
    statuses = {"PENDING", "PAID", "EXPIRED", "FAILED"}
    assert {f"ORDER_{status}" for status in statuses} <= set(Conflict.codes)


def test_every_declared_code_is_documented_for_clients() -> None:
    document = json.loads((PROJECT_ROOT / "docs" / "openapi.json").read_text())
    in_contract = {
        code
        for methods in document["paths"].values()
        for spec in methods.values()
        for answer in spec["responses"].values()
        for code in answer["content"]
        .get("application/json", {})
        .get("schema", {})
        .get("properties", {})
        .get("error", {})
        .get("enum", [])
    }
    readme = (PROJECT_ROOT / "README.md").read_text()
    api = readme[readme.index("## HTTP API") :]
    api = api[: api.index("\n## ", 1)]
    declared = {code for cls in _tree() for code in cls.codes}
    in_readme = {c for c in declared if f"`{_status(c)} {c}`" in api}
    undocumented = declared - in_contract - in_readme
    assert undocumented == set()


def _status(code: str) -> int:
    [status] = {cls.status for cls in _tree() if code in cls.codes}
    return status


def test_the_pre_rendered_refusal_is_the_trees_overloaded() -> None:
    assert OVERLOADED_START["status"] == Overloaded.status == 503
    assert OVERLOADED_BODY["body"] == b'{"error":"OVERLOADED"}'
    headers = OVERLOADED_START["headers"]
    assert isinstance(headers, list) and (b"retry-after", b"1") in headers
