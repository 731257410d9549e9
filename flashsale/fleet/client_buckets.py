"""The balancer's per-client buckets (deploy/haproxy/client_bucket.lua): the lines of its
frontend that keep, once for the fleet, the two buckets every gateway keeps for itself (per
client address, per buyer on the purchase route; gateway/ratelimit.py, gateway/purchase.py),
and answer a refusal with the gateway's 429.

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

from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX
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


def _buyer(bucket: Bucket, tokens: BuyerTokens, key_file: Path | None) -> list[str]:
    if not tokens.algorithms:
        return []
    if tokens.public_key:
        if key_file is None:
            raise ValueError("a public key to verify buyer tokens with needs a key file")
        key = f'"{key_file}"'
    else:
        key = f"\"'${{{SECRET_VARIABLE}}}'\""  # expanded from the environment when loaded
    rate, burst = bucket
    taken = "{ var(txn.buyer) -m found } !{ var(txn.retry_after) -m found }"
    purchase = f"METH_POST {{ path_beg {PURCHASE_PREFIX} }} {{ path_end {PURCHASE_SUFFIX} }}"
    verified = (
        f"{{ var(txn.bearer_alg) -m str {' '.join(tokens.algorithms)} }}"
        f" {{ var(txn.bearer),jwt_verify(txn.bearer_alg,{key}) -m int 1 }}"
    )
    return [
        "    # One bucket per buyer for the whole fleet, the one a gateway keeps on the purchase",
        "    # route: the buyer is the sub of a bearer token whose signature verifies here",
        "    # (flashsale/fleet/client_buckets.py); any other token names no bucket.",
        f"    http-request set-var(txn.bearer) http_auth_bearer if {purchase}",
        "    http-request set-var(txn.bearer_alg) var(txn.bearer),jwt_header_query('$.alg')"
        " if { var(txn.bearer) -m found }",
        "    http-request set-var(txn.buyer) var(txn.bearer),jwt_payload_query('$.sub')"
        f" if {verified}",
        f"    http-request lua.client_bucket txn.buyer {rate!r} {burst!r} if {taken}",
        "    # Given back for an answer a gateway gives before its buyer bucket (no token, no",
        "    # item, not open or not admitted, sold out): it would not have taken one.",
        f"    http-response lua.client_bucket_refund txn.buyer {rate!r} {burst!r}"
        f" if {taken} {{ status {' '.join(map(str, REFUNDED))} }}",
    ]


def render(
    refusal: str,
    address: Bucket | None,
    buyer: Bucket | None,
    tokens: BuyerTokens | None,
    key_file: Path | None = None,
) -> str:
    """The frontend's bucket lines: address first, as a gateway takes them (a request its
    address bucket refuses spends no buyer token), then the 429 of either, whose body is
    ``refusal`` (the gateway's, quoted for haproxy)."""
    lines = _address(address) if address is not None else []
    if buyer is not None and tokens is not None:
        lines += _buyer(buyer, tokens, key_file)
    if not lines:
        return ""
    lines += [
        "    # The gateway's 429, Retry-After computed as it does (client_bucket.lua).",
        f"    http-request return status 429 content-type \"application/json\" string '{refusal}'"
        ' hdr retry-after "%[var(txn.retry_after)]" hdr server granian'
        ' hdr date "%[date,http_date]" if { var(txn.retry_after) -m found }',
    ]
    return "\n".join(lines)
