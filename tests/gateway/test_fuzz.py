"""The gateway under fuzzing, over real HTTP.

1. Schema-driven (schemathesis, from the document the gateway serves): every operation, with
   generated parameters and bodies, answers no 5xx and only what the document says (status,
   content type, headers, body schema). Bounded: a few dozen examples an operation.
2. Property-based (hypothesis) on the purchase route, below HTTP clients: arbitrary path bytes
   and header bytes, tokens spelled every odd way, never a 5xx and never a unit sold.

Credentials go only where a request cannot change what other tests own: buyer tokens of fresh
buyers for order lookups, pay and cancel (random order ids) and for buying this module's own
item; the admin token for reads; the service token for voucher calls (random codes, and this
module's own vouchers, where the bodies are fuzzed). Admin writes go without it (401): arming
would re-arm other tests' sales, and random sales and vouchers, most of them open for years,
would stay in every gateway's catalog (and flash ones in Redis) for good.
"""

from __future__ import annotations

import datetime as dt
import itertools
import socket
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from flashsale.stack.processes import settings_env
from gateway import openapi
from gateway.auth import sign_token
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX, purchase_path
from kernel.settings import Settings
from rig.sale import LIFTED_IP_LIMITS
from tests.support.gateway import ADMIN, SERVICE, new_sale, running_gateway
from tests.support.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FUZZ_PORT = worker_port(18113)
EXAMPLES = 20  # per run (operation, mode, target): ~55 runs, ~1,100 requests
STOCK = 5
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
AnyCase = Case[APIOperation[Any, Any, Any, Any]]  # a case of any operation
_buyers = itertools.count(uuid.uuid4().int % 10**12 * 1000 + 10**15)


@pytest.fixture(scope="module")
def gateway(live_stack: Settings) -> Iterator[str]:
    # The fuzzing presents hundreds of made-up bearers from this one address, each a failed
    # authentication, which would lock the address out of the module's own admin calls (its
    # sales) for minutes; the limit itself is tests/gateway/test_admin_auth_limit.py's.
    unlimited_guesses = {"auth_failure_burst": 1e9}
    env = settings_env(**LIFTED_IP_LIMITS, **unlimited_guesses)
    with running_gateway(live_stack, FUZZ_PORT, **env) as base:
        yield base


@pytest.fixture(scope="module")
def api(gateway: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{gateway}/openapi.json")


@pytest.fixture(scope="module")
def own(gateway: str) -> dict[str, dict[str, Any]]:
    """Path parameters that name things of this module's own: where fuzzing may buy, reserve,
    confirm and release (an item, an ordinary and a flash voucher)."""
    item_id = new_sale(gateway, STOCK, 2)["items"][0]["itemId"]
    return {
        "own item": {"item_id": item_id},
        "own voucher": {"code": _new_voucher(gateway, flash=False)},
        "own flash voucher": {"code": _new_voucher(gateway, flash=True)},
    }


def _new_voucher(base: str, *, flash: bool) -> str:
    code = f"FZ{'F' if flash else 'O'}-{uuid.uuid4().hex[:16]}"
    now = dt.datetime.now(dt.UTC)
    body = {
        "code": code,
        "discountAmount": 100,
        "minOrderAmount": 1000,
        "totalLimit": 50,
        "perCustomerLimit": 1,
        "startsAt": (now - dt.timedelta(minutes=1)).isoformat(),
        "endsAt": (now + dt.timedelta(hours=2)).isoformat(),
        "isFlash": flash,
    }
    created = httpx.post(f"{base}/admin/vouchers", json=body, headers=ADMIN, timeout=30)
    assert created.status_code == 201, created.text
    return code


def _credentials(case: AnyCase, cfg: Settings) -> dict[str, str]:
    """What may be sent with this case (see the module docstring)."""
    path, method = case.operation.path, case.operation.method.lower()
    if path.startswith("/api/flash-sales/"):  # the purchase only runs with credentials on ours
        return {"Authorization": f"Bearer {sign_token(cfg, next(_buyers))}"}
    if path.startswith("/admin/") and method == "get":
        return ADMIN
    if path.startswith("/vouchers/"):
        return SERVICE
    return {}


# One test per operation, mode and target, each its own Hypothesis run (schemathesis's pytest
# plugin does the same, but reads pytest internals that pytest 9 removed). Negative cases
# (parameters or bodies the document forbids) only where there is something to get wrong.
_POSITIVE, _NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
_PURCHASE = f"{PURCHASE_PREFIX}{{item_id}}{PURCHASE_SUFFIX}"
_VOUCHER_CALLS = ("/vouchers/{code}/reservations", "/vouchers/{code}/reservations/{order_id}")
_RUNS = [
    (f"{op.method.upper()} {op.path}", mode, "any")
    for op in openapi.OPERATIONS
    for mode in (_POSITIVE, _NEGATIVE)
    if mode is _POSITIVE or op.parameters or op.body is not None
]
_RUNS += [(f"POST {_PURCHASE}", _POSITIVE, "own item")]
_RUNS += [
    (f"{op.method.upper()} {op.path}", mode, target)
    for op in openapi.OPERATIONS
    if op.path.startswith(_VOUCHER_CALLS)
    for mode in (_POSITIVE, _NEGATIVE)
    for target in ("own voucher", "own flash voucher")
]


@pytest.mark.parametrize(("operation", "mode", "target"), _RUNS, ids=["-".join(r) for r in _RUNS])
def test_every_answer_conforms_to_the_document(
    operation: str,
    mode: GenerationMode,
    target: str,
    api: schemathesis.BaseSchema,
    own: dict[str, dict[str, Any]],
    live_stack: Settings,
) -> None:
    method, path = operation.split(" ", 1)
    pinned = own.get(target)
    if path == _PURCHASE and pinned is None:  # without a token: nothing is ever bought
        credentials: dict[str, str] | None = {}
    else:
        credentials = None
    strategy = api[path][method].as_strategy(generation_mode=mode, path_parameters=pinned)

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=strategy)
    def answers_conform(case: AnyCase) -> None:
        headers = _credentials(case, live_stack) if credentials is None else credentials
        case.call_and_validate(headers=headers, checks=CHECKS)

    answers_conform()


def test_the_served_document_is_the_published_one(gateway: str) -> None:
    answer = httpx.get(f"{gateway}/openapi.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.content == openapi.DOCUMENT


def test_a_real_purchase_conforms_too(
    gateway: str, api: schemathesis.BaseSchema, live_stack: Settings
) -> None:
    """The answers the unauthenticated fuzzing never sees: 202, 409 and 410, on an item of ours."""
    item_id = new_sale(gateway, 1, 1)["items"][0]["itemId"]
    operation = api[f"{PURCHASE_PREFIX}{{item_id}}{PURCHASE_SUFFIX}"]["POST"]
    winner, loser = next(_buyers), next(_buyers)
    seen = []
    for buyer in (winner, winner, loser):
        case = operation.Case(path_parameters={"item_id": item_id})
        token = {"Authorization": f"Bearer {sign_token(live_stack, buyer)}"}
        seen.append(case.call_and_validate(headers=token, checks=CHECKS).status_code)
    assert seen[0] == 202 and seen[1] in (409, 410) and seen[2] == 410, seen


# Hypothesis: arbitrary bytes at the purchase route


def _units_left(base: str, item_id: int) -> int:
    counters: dict[str, Any] = httpx.get(f"{base}/admin/items/{item_id}", headers=ADMIN).json()
    left: int = counters["unitsLeft"]
    return left


def _status(port: int, request: bytes) -> int | None:
    """The status the server answers a raw request with; None if it closed without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        reply = b""
        while b"\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            reply += chunk
    version, _, rest = reply.partition(b" ")
    assert version.startswith(b"HTTP/1."), reply
    return int(rest[:3])


_HEADER_NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789-!#$%&'*+.^_`|~", min_size=1)
# A header value: anything but what ends a line (the server refuses those with a 400).
_HEADER_VALUE = st.binary(max_size=200).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_UNICODE_DIGITS = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
_FULLWIDTH_DIGITS = str.maketrans("0123456789", "０１２３４５６７８９")


def _paths(item_id: int) -> st.SearchStrategy[bytes]:
    """The item's path spelled every way that must not name it, and arbitrary others."""
    real = str(item_id)
    odd_ids = st.sampled_from(
        [
            real.translate(_UNICODE_DIGITS),
            real.translate(_FULLWIDTH_DIGITS),
            f"{real}²",
            "²",
            f"+{real}",
            f" {real}",
            f"{real} ",
            f"0x{item_id:x}",
            f"{real}.0",
            f"{real}/",
            f"{real}%00",
            f"{real};x",
            "9" * 16,
            "",
        ]
    )
    encoded = st.one_of(odd_ids.map(str.encode), st.binary(max_size=40)).map(
        lambda raw: urllib.parse.quote_from_bytes(raw, safe="").encode()
    )
    visible = st.binary(max_size=40).map(
        lambda raw: bytes(b for b in raw if 0x21 <= b <= 0x7E or b >= 0x80)
    )
    segment = st.one_of(encoded, visible, odd_ids.map(str.encode))
    return st.one_of(
        segment.map(lambda s: PURCHASE_PREFIX.encode() + s + PURCHASE_SUFFIX.encode()),
        visible.map(lambda s: b"/" + s),
    )


@st.composite
def _authorization(draw: st.DrawFn, token: str) -> bytes | None:
    """No header, garbage, or the real token edited (each edit must make it worthless)."""
    kind = draw(st.sampled_from(["none", "garbage", "edited", "prefix"]))
    if kind == "none":
        return None
    if kind == "garbage":
        return draw(_HEADER_VALUE)
    if kind == "prefix":
        prefix = draw(st.sampled_from([b"bearer ", b"Bearer  ", b"Bearer\t", b"Basic ", b"Token "]))
        return prefix + token.encode()
    i = draw(st.integers(0, len(token)))
    char = draw(st.sampled_from("=+/.!~ ²٤AQgw-_")).encode()
    edit = draw(st.sampled_from(["insert", "replace", "delete"]))
    edited = {
        "insert": token[:i].encode() + char + token[i:].encode(),
        "replace": token[:i].encode() + char + token[i + 1 :].encode(),
        "delete": (token[:i] + token[i + 1 :]).encode(),
    }[edit]
    return b"Bearer " + edited if edited != token.encode() else None


@pytest.fixture(scope="module")
def sale(gateway: str) -> int:
    item_id: int = new_sale(gateway, STOCK, 2)["items"][0]["itemId"]
    return item_id


def test_arbitrary_bytes_at_the_purchase_route_never_fail_nor_sell(
    gateway: str, sale: int, live_stack: Settings
) -> None:
    token = sign_token(live_stack, next(_buyers))  # valid: only a correct path could spend it
    statuses: set[int | None] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        path=_paths(sale),
        authorization=_authorization(token),
        headers=st.lists(st.tuples(_HEADER_NAME, _HEADER_VALUE), max_size=4),
        method=st.sampled_from([b"POST", b"POST", b"GET", b"PUT", b"post"]),
    )
    def property_(
        path: bytes, authorization: bytes | None, headers: list[tuple[str, bytes]], method: bytes
    ) -> None:
        lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1"]
        lines += [name.encode() + b": " + value for name, value in headers]
        if authorization is not None:
            lines.append(b"Authorization: " + authorization)
        lines += [b"Content-Length: 0", b"Connection: close", b"", b""]
        status = _status(FUZZ_PORT, b"\r\n".join(lines))
        statuses.add(status)
        assert status is None or status < 500, (status, lines)
        assert status != 202, lines

    property_()
    assert _units_left(gateway, sale) == STOCK, statuses
    # The real path with the real token still buys: the fuzzing above was not vacuous.
    assert (
        httpx.post(
            f"{gateway}{purchase_path(sale)}", headers={"Authorization": f"Bearer {token}"}
        ).status_code
        == 202
    )
    assert _units_left(gateway, sale) == STOCK - 1


@pytest.mark.parametrize(
    "spelling",
    ["٤٢", "４２", "²", "4²", "+4", "4 ", "0x4"],
    ids=["arabic-indic", "fullwidth", "superscript", "digits+superscript", "plus", "space", "hex"],
)
def test_only_ascii_digits_name_an_item(
    gateway: str, sale: int, spelling: str, live_stack: Settings
) -> None:
    """``"٤٢".isdigit()`` and ``int("٤٢") == 42``: a non-ASCII spelling of an id must name
    nothing (404), never another item, never a 500 (``int("²")`` raises)."""
    odd = spelling.replace("4", str(sale)).replace("٤٢", str(sale).translate(_UNICODE_DIGITS))
    odd = odd.replace("４２", str(sale).translate(_FULLWIDTH_DIGITS))
    quoted = urllib.parse.quote(odd, safe="")
    token = {"Authorization": f"Bearer {sign_token(live_stack, next(_buyers))}"}
    bought = httpx.post(f"{gateway}{PURCHASE_PREFIX}{quoted}{PURCHASE_SUFFIX}", headers=token)
    assert (bought.status_code, bought.json()) == (404, {"error": "ITEM_NOT_FOUND"}), odd
    counters = httpx.get(f"{gateway}/admin/items/{quoted}", headers=ADMIN)
    assert (counters.status_code, counters.json()) == (404, {"error": "ITEM_NOT_FOUND"}), odd
