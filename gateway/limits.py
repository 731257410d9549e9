"""The limits as the Starlette routes apply them: who the client is (behind trusted proxies
only), then its buckets, cheapest first, before any token check or database query."""

from __future__ import annotations

from starlette.requests import Request

from gateway.client_address import ClientAddress
from gateway.ratelimit import RouteLimits
from gateway.requests import services
from gateway.services import Services


def _limits(request: Request) -> tuple[RouteLimits, ClientAddress]:
    state = request.app.state
    return state.limits, state.client_address


def buyer(request: Request) -> tuple[Services, int]:
    """The services and the buyer id of an order route: the client address's bucket, the
    token, then the buyer's own order bucket (429 RATE_LIMITED, or 401)."""
    limits, address = _limits(request)
    limits.per_address.check(address.of(request.scope))
    s = services(request)
    user_id = s.verifier.user_id(request.headers.get("authorization"))
    limits.orders.check(user_id)
    return s, user_id


def operations(request: Request) -> Services:
    """/metrics and /readyz: the client address's operations bucket (429 RATE_LIMITED)."""
    limits, address = _limits(request)
    limits.ops.check(address.of(request.scope))
    return services(request)
