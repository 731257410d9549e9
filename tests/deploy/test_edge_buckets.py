"""The balancer's per-buyer bucket and per-address join bucket (flashsale/fleet/client_buckets.py),
with a real haproxy in front of a backend that never limits anyone: only the balancer's refusals
are 429s here. A buyer is the ``sub`` of a token whose signature verifies at the balancer; a
forged, unsigned or malformed token names no bucket (and breaks nothing), and a token is given
back for the answers a gateway gives before its own bucket."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from flashsale.fleet import client_buckets, haproxy
from flashsale.fleet.client_buckets import BuyerTokens
from flashsale.fleet.haproxy import Edge
from gateway.errors import RateLimited
from gateway.paths import purchase_path
from gateway.responses import render
from rig.ports import free_port
from tests.deploy.backend import Backend

pytestmark = [pytest.mark.slow]

SECRET = "edge-buckets-test-secret-" + "0123456789abcdef" * 3  # HS512 wants 64 bytes
RATE_PER_S, BURST = 0.01, 3  # no token comes back by itself within a test
OPEN, NOT_OPEN = purchase_path(1), purchase_path(2)
JOIN, JOIN_REFUSED = "/api/flash-sales/sales/1/queue", "/api/flash-sales/sales/2/queue"
LIMITED = Edge(1000, 100, 1000, 1000, buyer_bucket=(RATE_PER_S, BURST))


def _token(sub: str, key: str = SECRET, algorithm: str = "HS256") -> str:
    claims = {"sub": sub, "exp": int(time.time()) + 600}
    return jwt.encode(claims, key, algorithm=algorithm)


def _hs256(sub: str, key: bytes) -> str:
    """An HS256 token by hand: PyJWT refuses to sign with a public key as the secret."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = part(json.dumps({"sub": sub, "exp": int(time.time()) + 600}).encode())
    signature = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(signature)}"


def _serving(backend: Backend, tmp_path: Path, edge: Edge) -> Iterator[httpx.Client]:
    if not shutil.which("haproxy"):
        pytest.fail("haproxy is missing: scripts/bootstrap installs it")
    backend.release.set()
    backend.statuses[NOT_OPEN] = 403
    backend.statuses[JOIN_REFUSED] = 401  # as a gateway answers a token past its exp
    log = tmp_path / "haproxy.log"
    with haproxy.serving(backend.address, free_port(), tmp_path, edge, log=log) as balancer:
        with httpx.Client(base_url=balancer.base, timeout=10) as client:
            yield client


@pytest.fixture
def edge(backend: Backend, tmp_path: Path) -> Iterator[httpx.Client]:
    tokens = BuyerTokens(("HS256",), secret=SECRET)
    yield from _serving(backend, tmp_path, dataclasses.replace(LIMITED, buyer_tokens=tokens))


def _statuses(client: httpx.Client, token: str, n: int, path: str = OPEN) -> list[int]:
    headers = {"Authorization": f"Bearer {token}"}
    return [client.post(path, headers=headers).status_code for _ in range(n)]


def _is_the_gateways_refusal(answer: httpx.Response) -> None:
    status, headers, body = render(RateLimited(retry_after=1))
    assert (answer.status_code, answer.content) == (status, body)
    for name, value in headers:
        if name != b"retry-after":
            assert answer.headers[name.decode()] == value.decode(), name
    # As the gateway computes it: the seconds until a token is back, at 0.01 a second.
    assert 99 <= int(answer.headers["retry-after"]) <= 100, answer.headers


def test_a_buyer_gets_the_burst_and_another_buyer_is_unaffected(edge: httpx.Client) -> None:
    assert _statuses(edge, _token("7"), BURST + 2) == [202] * BURST + [429, 429]
    refused = edge.post(OPEN, headers={"Authorization": f"Bearer {_token('7')}"})
    _is_the_gateways_refusal(refused)
    assert _statuses(edge, _token("8"), BURST) == [202] * BURST


def test_a_token_that_does_not_verify_spends_no_buyers_bucket(edge: httpx.Client) -> None:
    """Forged for buyer 9 (another key, no signature, alg none), or not a token at all: each is
    forwarded (a gateway answers it 401) and buyer 9 keeps its whole bucket."""
    unsigned = jwt.encode({"sub": "9"}, "", algorithm="none")
    forged = [_token("9", key="x" * 64), _token("9", algorithm="HS512"), unsigned]
    malformed = ["garbage", "a.b.c", "...", "e30.e30.e30", "%%.%%.%%", "x.y" * 2000]
    for token in forged + malformed:
        assert _statuses(edge, token, BURST + 1) == [202] * (BURST + 1), token[:40]
    for headers in ({}, {"Authorization": "Basic Zm9vOmJhcg=="}, {"Authorization": "Bearer"}):
        assert edge.post(OPEN, headers=headers).status_code == 202, headers
    assert _statuses(edge, _token("9"), BURST + 1) == [202] * BURST + [429]


def test_an_answer_given_before_a_gateways_bucket_gives_the_token_back(
    edge: httpx.Client,
) -> None:
    """A sale not open yet (403) is answered before a gateway's buyer bucket: polling it as
    often as a buyer likes leaves the bucket full for the opening."""
    assert _statuses(edge, _token("10"), 4 * BURST, NOT_OPEN) == [403] * (4 * BURST)
    assert _statuses(edge, _token("10"), BURST + 1) == [202] * BURST + [429]


@pytest.fixture
def join_edge(backend: Backend, tmp_path: Path) -> Iterator[httpx.Client]:
    tokens = BuyerTokens(("HS256",), secret=SECRET)
    only_joins = Edge(1000, 100, 1000, 1000, join_bucket=(RATE_PER_S, BURST), buyer_tokens=tokens)
    yield from _serving(backend, tmp_path, only_joins)


def test_one_address_gets_one_join_bucket_whoever_the_buyers(join_edge: httpx.Client) -> None:
    """Each join with another buyer's verified token: the address's burst, then the gateway's
    429; the purchase route and tokens that do not verify spend none of it; a join answered
    401 gives its token back."""
    unsigned = jwt.encode({"sub": "30"}, "", algorithm="none")
    for token in (_token("31", key="x" * 64), unsigned, "garbage"):
        assert _statuses(join_edge, token, BURST + 1, JOIN) == [202] * (BURST + 1), token[:40]
    assert _statuses(join_edge, _token("32"), BURST + 1) == [202] * (BURST + 1)  # purchases
    assert _statuses(join_edge, _token("33"), 2 * BURST, JOIN_REFUSED) == [401] * (2 * BURST)
    joined = [_statuses(join_edge, _token(str(40 + n)), 1, JOIN)[0] for n in range(BURST + 2)]
    assert joined == [202] * BURST + [429, 429]
    _is_the_gateways_refusal(
        join_edge.post(JOIN, headers={"Authorization": f"Bearer {_token('60')}"})
    )


def test_rs256_tokens_are_verified_with_the_public_key(backend: Backend, tmp_path: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    edge = dataclasses.replace(LIMITED, buyer_tokens=BuyerTokens(("RS256",), public_key=public))
    for client in _serving(backend, tmp_path, edge):
        # Key confusion (the public key as an HMAC secret) names no bucket.
        confused = _hs256("11", public.encode())
        assert _statuses(client, confused, BURST + 1) == [202] * (BURST + 1)
        assert _statuses(client, _token("11", pem, "RS256"), BURST + 1) == [202] * BURST + [429]


def test_a_secret_haproxy_cannot_be_given_is_refused_when_rendering() -> None:
    """The secret sits in single quotes once haproxy expands it: one inside would end them."""
    with pytest.raises(ValueError, match="single quote"):
        client_buckets.guard(BuyerTokens(("HS256",), secret="it's-a-secret" * 5))
    assert "FLASHSALE_JWT_SECRET" in client_buckets.guard(BuyerTokens(("HS256",), secret=SECRET))
