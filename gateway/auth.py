"""Buyer tokens: JWTs whose ``sub`` is the buyer's integer id, verified once and remembered
until their expiry. Only the configured algorithms are accepted (so ``alg: none`` and HS/RS key
confusion are refused); ``exp`` is required, ``iat`` and ``nbf`` may not lie in the future
(beyond the leeway), ``aud`` and ``iss`` must match when configured, and ``sub`` is 1-18 ASCII
digits. Anything else, however malformed, is a 401: never a 5xx.

Only the canonical spelling of a token is accepted (gateway/tokens.py), so one signed token is
one string: variants cannot be minted without the key, and the bounded cache holds each token
once."""

from __future__ import annotations

import time
from collections import OrderedDict

import jwt
from jwt.utils import is_pem_format, is_ssh_key

from gateway.errors import Unauthorized
from gateway.hs256 import HS256Fast, Rejected, buyer_id
from gateway.tokens import MAX_TOKEN_CHARS, canonical
from kernel.settings import PREFIX, Settings

_ASYMMETRIC = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")
# What PyJWT (or the JSON and base64 under it) may raise on a hostile token besides its own
# errors; each means "not a valid token", never a server error.
_MALFORMED = (jwt.PyJWTError, ValueError, TypeError, KeyError, OverflowError, RecursionError)
_PREFIX = "Bearer "
_START = len(_PREFIX)
_MAX_HEADER = _START + MAX_TOKEN_CHARS


class TokenVerifier:
    def __init__(self, cfg: Settings, max_cached: int | None = None) -> None:
        self.algorithms = list(cfg.jwt_algorithms)
        if cfg.jwt_public_key:
            if any(a not in _ASYMMETRIC for a in self.algorithms):
                raise SystemExit(
                    "FLASHSALE_JWT_PUBLIC_KEY needs asymmetric FLASHSALE_JWT_ALGORITHMS"
                )
            self.key: str = cfg.jwt_public_key
        else:
            if any(not a.startswith("HS") for a in self.algorithms):
                raise SystemExit("HS algorithms only, unless FLASHSALE_JWT_PUBLIC_KEY is set")
            if is_pem_format(cfg.jwt_secret.encode()) or is_ssh_key(cfg.jwt_secret.encode()):
                # A public key as an HMAC secret is key confusion by configuration (PyJWT
                # refuses every token then; the fast path must not accept them either).
                raise SystemExit("FLASHSALE_JWT_SECRET is a key: set FLASHSALE_JWT_PUBLIC_KEY")
            self.key = cfg.jwt_secret
        self.leeway = cfg.jwt_leeway_seconds
        self.audience = cfg.jwt_audience or None
        self.issuer = cfg.jwt_issuer or None
        self.fast = (
            HS256Fast(cfg.jwt_secret, self.leeway, cfg.jwt_audience, cfg.jwt_issuer)
            if "HS256" in self.algorithms and not cfg.jwt_public_key
            else None
        )
        self.max_cached = cfg.jwt_cache_size if max_cached is None else max_cached
        # token -> (user id, int(exp)); least recently used first.
        self._cache: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def user_id(self, authorization: str | None) -> int:
        """The buyer id from an ``Authorization: Bearer <jwt>`` header, or Unauthorized."""
        if not authorization or not authorization.startswith(_PREFIX):
            raise Unauthorized()
        if len(authorization) > _MAX_HEADER:
            raise Unauthorized()  # before hashing it for the cache
        token = authorization[_START:]
        now = time.time()
        cache = self._cache
        cached = cache.get(token)
        if cached is not None:
            if cached[1] > now - self.leeway:
                cache.move_to_end(token)
                return cached[0]
            del cache[token]  # expired: verification below refuses it
        if not canonical(token):
            raise Unauthorized()
        verified = self._verify(token, now)
        cache[token] = verified
        if len(cache) > self.max_cached:
            cache.popitem(last=False)
        return verified[0]

    @property
    def cached(self) -> int:
        return len(self._cache)

    def _verify(self, token: str, now: float) -> tuple[int, int]:
        if self.fast is not None:
            try:
                verified = self.fast.verify(token, now)
            except Rejected:
                raise Unauthorized() from None
            if verified is not None:
                return verified
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=self.algorithms,
                options={"require": ["exp", "sub"]},
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
            )
            user, exp = buyer_id(claims["sub"]), int(claims["exp"])
        except _MALFORMED:
            raise Unauthorized() from None
        if user is None:
            raise Unauthorized()
        return user, exp


def sign_token(
    cfg: Settings, user_id: int, ttl_seconds: int = 3600, private_key: str | None = None
) -> str:
    """A signed buyer token (HS256 with the configured secret, unless a private key is given),
    with the configured audience and issuer."""
    now = int(time.time())
    claims: dict[str, object] = {"sub": str(user_id), "exp": now + ttl_seconds, "iat": now}
    if cfg.jwt_audience:
        claims["aud"] = cfg.jwt_audience
    if cfg.jwt_issuer:
        claims["iss"] = cfg.jwt_issuer
    if private_key:
        return jwt.encode(claims, private_key, algorithm=cfg.jwt_algorithms[0])
    return jwt.encode(claims, cfg.jwt_secret, algorithm="HS256")


# The settings that hold secrets, and when each one is in use.
_SECRETS = ("jwt_secret", "admin_token", "service_token")
# RFC 7518 section 3.2: an HMAC key at least as long as the hash's output.
_HMAC_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
# A bearer token is compared whole, so only its length stands between it and a guesser.
MIN_TOKEN_BYTES = 32


def refuse_dev_secrets(cfg: Settings) -> None:
    """Exit (one line, naming the variables to set) when a secret is empty, or outside the
    local stack still the public development default of kernel/settings.py, too short, or the
    admin token is the service token."""
    defaults = Settings()
    in_use = [n for n in _SECRETS if n != "jwt_secret" or not cfg.jwt_public_key]
    empty = [n for n in in_use if not getattr(cfg, n)]
    public = [n for n in in_use if getattr(cfg, n) == getattr(defaults, n)]
    if empty:
        raise SystemExit(f"refusing to start: {_listed(empty, 'is', 'are')} empty; set secrets")
    if public and cfg.env != "local":
        raise SystemExit(
            f"refusing to start: {_listed(public, 'is', 'are')} still the public development "
            f"{'default' if len(public) == 1 else 'defaults'} (FLASHSALE_ENV={cfg.env}); set "
            "secrets of your own, or FLASHSALE_ENV=local on the local stack"
        )
    weak = [] if cfg.env == "local" else weak_secrets(cfg)
    if weak:
        raise SystemExit(f"refusing to start: {'; '.join(weak)} (FLASHSALE_ENV={cfg.env})")


def weak_secrets(cfg: Settings) -> list[str]:
    """What makes the configured secrets guessable or interchangeable, naming each variable."""
    found = []
    if not cfg.jwt_public_key:
        hs = [a for a in cfg.jwt_algorithms if a in _HMAC_KEY_BYTES]
        need = max((_HMAC_KEY_BYTES[a] for a in hs), default=_HMAC_KEY_BYTES["HS256"])
        size = len(cfg.jwt_secret.encode())
        if size < need:
            found.append(
                f"{PREFIX}JWT_SECRET is {size} bytes, {'/'.join(hs) or 'HS256'} needs {need}"
            )
    tokens = {"admin_token": cfg.admin_token, "service_token": cfg.service_token}
    if cfg.waiting_room_secret:  # empty: derived from the admin token
        tokens["waiting_room_secret"] = cfg.waiting_room_secret
    for name, value in tokens.items():
        if len(value.encode()) < MIN_TOKEN_BYTES:
            found.append(
                f"{PREFIX}{name.upper()} is {len(value.encode())} bytes, at least "
                f"{MIN_TOKEN_BYTES} needed"
            )
    # Each secret grants one thing: two alike would let a voucher caller run the sales, or a
    # holder of a bearer token mint buyers' JWTs (and room tickets) with it.
    secrets = dict(tokens)
    if not cfg.jwt_public_key:
        secrets["jwt_secret"] = cfg.jwt_secret
    names = list(secrets)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if secrets[first] == secrets[second]:
                found.append(f"{PREFIX}{first.upper()} and {PREFIX}{second.upper()} are the same")
    return found


def _listed(settings: list[str], one: str, many: str) -> str:
    names = ", ".join(PREFIX + n.upper() for n in settings)
    return f"{names} {one if len(settings) == 1 else many}"
