"""The balancer's per-client buckets (deploy/haproxy/client_bucket.lua): the lines of its
frontend that keep, once for the fleet, the buckets every gateway keeps for itself (per client
address; per buyer on the purchase route; per client address on a waiting room's join, taken
only with a token that verifies, as a gateway takes it only after the token check;
gateway/ratelimit.py, gateway/purchase.py, gateway/waiting_room/join.py), and answer a refusal
with the gateway's 429.

A buyer is named by the ``sub`` of a bearer token only when the token's signature verifies at
the balancer, with the gateways' key and one of their algorithms (haproxy's ``jwt_verify``).
An unverified ``sub`` is anyone's to write: keyed on it, one address could spend every buyer's
bucket with forged tokens. A token that does not verify (forged, malformed, ``alg: none``,
absent) names no bucket here and goes on to a gateway, which refuses it (401) under the
address bucket. The signature alone is checked here, not ``exp`` or the claims: a token that
verifies was signed for its ``sub``, so at worst it spends its own buyer's bucket."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX, QUEUE_PREFIX, QUEUE_SUFFIX
from kernel.settings import PREFIX, Settings

Bucket = tuple[float, float]  # tokens a second, burst
BUYER_PREFIX = "/api/flash-sales/"  # the routes a gateway counts in its per-address bucket
# The variable haproxy's configuration reads the HMAC secret from: never written in its text.
SECRET_VARIABLE = PREFIX + "JWT_SECRET"
# What jwt_verify checks in haproxy 2.6 (it refuses the PS family); a token signed otherwise
# keeps its gateways' own buckets only.
VERIFIABLE = frozenset(
    {"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}
)
# The answers a gateway's purchase gives before its buyer bucket takes a token (401, 404, 403
# not open or not admitted, 410 from its sold-out flag; gateway/purchase.py): the balancer
# gives the token it took back. Its 410 after a reservation attempt is given back too (the
# item is gone: nothing more to limit).
REFUNDED = (401, 403, 404, 410)
# A join's: only 401 comes before a gateway's join bucket (the per-address one refuses first
# here too, and then no join token is taken).
JOIN_REFUNDED = (401,)
PURCHASE = f"METH_POST {{ path_beg {PURCHASE_PREFIX} }} {{ path_end {PURCHASE_SUFFIX} }}"
JOIN = f"METH_POST {{ path_beg {QUEUE_PREFIX} }} {{ path_end {QUEUE_SUFFIX} }}"


@dataclass(frozen=True, slots=True)
class BuyerTokens:
    """How the balancer verifies a buyer token: the gateways' algorithms it can check, and their
    public key (PEM) or, without one, their HMAC secret (given to haproxy in its environment,
    `environment`)."""

    algorithms: tuple[str, ...]
    public_key: str = ""
    secret: str = field(default="", repr=False)

    @classmethod
    def of(cls, cfg: Settings) -> BuyerTokens:
        algorithms = tuple(a for a in cfg.jwt_algorithms if a in VERIFIABLE)
        if cfg.jwt_public_key:
            return cls(algorithms, cfg.jwt_public_key)
        return cls(algorithms, secret=cfg.jwt_secret)

    def environment(self) -> dict[str, str]:
        """What haproxy's process needs in its environment."""
        return {} if self.public_key else {SECRET_VARIABLE: self.secret}


def guard(tokens: BuyerTokens | None) -> str:
    """Top-of-configuration lines that refuse to start haproxy without the secret it verifies
    with: an empty key would verify tokens anyone can sign."""
    if tokens is None or tokens.public_key or not tokens.algorithms:
        return ""
    if "'" in tokens.secret:  # the quote its expansion sits in (below) would end there
        raise ValueError(f"{SECRET_VARIABLE} holds a single quote: haproxy cannot be given it")
    var = SECRET_VARIABLE
    return (
        f'.if !defined({var}) || streq("\'${var}\'","")\n'
        f'.alert "{var} is not in haproxy\'s environment: buyer tokens cannot be verified"\n'
        ".endif\n"
    )


def _address(bucket: Bucket) -> list[str]:
    rate, burst = bucket
    return [
        "    # One bucket per client address for the whole fleet, the one a gateway keeps.",
        f"    http-request set-var(txn.client_address) src if {{ path_beg {BUYER_PREFIX} }}",
        f"    http-request lua.client_bucket txn.client_address {rate!r} {burst!r}"
        " if { var(txn.client_address) -m found }",
    ]


def _verified(tokens: BuyerTokens, key_file: Path | None) -> str:
    """The condition that the request's bearer token (txn.bearer) verifies here."""
    if tokens.public_key:
        if key_file is None:
            raise ValueError("a public key to verify buyer tokens with needs a key file")
        key = f'"{key_file}"'
    else:
        key = f"\"'${{{SECRET_VARIABLE}}}'\""  # expanded from the environment when loaded
    return (
        f"{{ var(txn.bearer_alg) -m str {' '.join(tokens.algorithms)} }}"
        f" {{ var(txn.bearer),jwt_verify(txn.bearer_alg,{key}) -m int 1 }}"
    )


def _bearer(routes: list[str]) -> list[str]:
    """Read the bearer token (and its algorithm) on ``routes`` (conditions, any of them)."""
    on = " || ".join(routes)
    return [
        f"    http-request set-var(txn.bearer) http_auth_bearer if {on}",
        "    http-request set-var(txn.bearer_alg) var(txn.bearer),jwt_header_query('$.alg')"
        " if { var(txn.bearer) -m found }",
    ]


def _taken(var: str, bucket: Bucket, refunded: tuple[int, ...]) -> list[str]:
    """Take a token from ``var``'s bucket (unless an earlier bucket refused), and give it back
    for a ``refunded`` answer."""
    rate, burst = bucket
    taken = f"{{ var({var}) -m found }} !{{ var(txn.retry_after) -m found }}"
    return [
        f"    http-request lua.client_bucket {var} {rate!r} {burst!r} if {taken}",
        f"    http-response lua.client_bucket_refund {var} {rate!r} {burst!r}"
        f" if {taken} {{ status {' '.join(map(str, refunded))} }}",
    ]


def _buyer(bucket: Bucket, verified: str) -> list[str]:
    return [
        "    # One bucket per buyer for the whole fleet, the one a gateway keeps on the purchase",
        "    # route: the buyer is the sub of a bearer token whose signature verifies here",
        "    # (flashsale/fleet/client_buckets.py); any other token names no bucket. Given back",
        "    # for an answer a gateway gives before its buyer bucket (no token, no item, not",
        "    # open or not admitted, sold out): it would not have taken one.",
        "    http-request set-var(txn.buyer) var(txn.bearer),jwt_payload_query('$.sub')"
        f" if {PURCHASE} {verified}",
        *_taken("txn.buyer", bucket, REFUNDED),
    ]


def _joiner(bucket: Bucket, verified: str) -> list[str]:
    return [
        "    # One join bucket per client address for the whole fleet, the one a gateway keeps,",
        "    # taken only with a token that verifies (a forged one must not spend it).",
        f"    http-request set-var(txn.joiner) src if {JOIN} {verified}",
        *_taken("txn.joiner", bucket, JOIN_REFUNDED),
    ]


def render(
    refusal: str,
    address: Bucket | None,
    buyer: Bucket | None,
    tokens: BuyerTokens | None,
    key_file: Path | None = None,
    join: Bucket | None = None,
) -> str:
    """The frontend's bucket lines: address first, as a gateway takes them (a request its
    address bucket refuses spends no buyer or join token), then the 429 of any, whose body is
    ``refusal`` (the gateway's, quoted for haproxy)."""
    lines = _address(address) if address is not None else []
    if tokens is not None and tokens.algorithms and (buyer is not None or join is not None):
        verified = _verified(tokens, key_file)
        lines += _bearer([route for route, b in ((PURCHASE, buyer), (JOIN, join)) if b])
        if buyer is not None:
            lines += _buyer(buyer, verified)
        if join is not None:
            lines += _joiner(join, verified)
    if not lines:
        return ""
    lines += [
        "    # The gateway's 429, Retry-After computed as it does (client_bucket.lua).",
        f"    http-request return status 429 content-type \"application/json\" string '{refusal}'"
        ' hdr retry-after "%[var(txn.retry_after)]" hdr server granian'
        ' hdr date "%[date,http_date]" if { var(txn.retry_after) -m found }',
    ]
    return "\n".join(lines)
