"""Buyer tokens: JWTs whose ``sub`` is the buyer's integer id, verified once and cached until
their expiry. Only the configured algorithms are accepted (so ``alg: none`` and HS/RS key
confusion are refused); ``exp`` is required."""

from __future__ import annotations

import time

import jwt

from gateway.errors import Unauthorized
from gateway.hs256 import HS256Fast, Rejected
from kernel.settings import Settings

_ASYMMETRIC = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")


class TokenVerifier:
    def __init__(self, cfg: Settings, max_cached: int = 1_000_000) -> None:
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
            self.key = cfg.jwt_secret
        self.leeway = cfg.jwt_leeway_seconds
        self.fast = (
            HS256Fast(cfg.jwt_secret, self.leeway)
            if "HS256" in self.algorithms and not cfg.jwt_public_key
            else None
        )
        self.max_cached = max_cached
        self._cache: dict[str, tuple[int, float]] = {}

    def user_id(self, authorization: str | None) -> int:
        """The buyer id from an ``Authorization: Bearer <jwt>`` header, or Unauthorized."""
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized()
        token = authorization[7:].strip()
        now = time.time()
        cached = self._cache.get(token)
        if cached is not None and cached[1] + self.leeway > now:
            return cached[0]
        if self.fast is not None:
            try:
                verified = self.fast.verify(token, now)
            except Rejected:
                raise Unauthorized() from None
            if verified is not None:
                self._remember(token, verified, now)
                return verified[0]
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=self.algorithms,
                options={"require": ["exp", "sub"]},
                leeway=self.leeway,
            )
        except jwt.PyJWTError:
            raise Unauthorized() from None
        sub = claims["sub"]
        if not isinstance(sub, str) or not sub.isdigit() or len(sub) > 18:
            raise Unauthorized()
        self._remember(token, (int(sub), float(claims["exp"])), now)
        return int(sub)

    def _remember(self, token: str, verified: tuple[int, float], now: float) -> None:
        if len(self._cache) >= self.max_cached:
            self._cache = {t: v for t, v in self._cache.items() if v[1] + self.leeway > now}
            if len(self._cache) >= self.max_cached:
                self._cache.clear()
        self._cache[token] = verified


def sign_token(
    cfg: Settings, user_id: int, ttl_seconds: int = 3600, private_key: str | None = None
) -> str:
    """A signed buyer token (HS256 with the configured secret, unless a private key is given)."""
    claims = {"sub": str(user_id), "exp": int(time.time()) + ttl_seconds, "iat": int(time.time())}
    if private_key:
        return jwt.encode(claims, private_key, algorithm=cfg.jwt_algorithms[0])
    return jwt.encode(claims, cfg.jwt_secret, algorithm="HS256")
