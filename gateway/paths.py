"""The paths the front treats apart, in one place: the purchase route's (the front serves it,
the sold-out flags index it), a waiting room's queue (the front serves its polls), and those
admission skips (the probes and the operator's routes)."""

from __future__ import annotations

PURCHASE_PREFIX = "/api/flash-sales/items/"
PURCHASE_SUFFIX = "/purchase"
QUEUE_PREFIX = "/api/flash-sales/sales/"
QUEUE_SUFFIX = "/queue"
# Never refused by admission: a probe that failed under load would take a busy process out of
# its load balancer and pile its share onto the others, and a refused scrape would hide the
# overload from Prometheus exactly then. (/readyz and /metrics have their own rate limit.)
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
# Nor the operator's routes: pausing an item or arming a sale is needed most while buyers
# overload the gateway, and an operator's few authenticated requests do not make a queue
# (wrong tokens are limited per address, gateway/requests.py).
ADMIN_PREFIX = "/admin/"


def ungated(path: str) -> bool:
    """Whether admission lets ``path`` through whatever the load."""
    return path in PROBES or path.startswith(ADMIN_PREFIX)


def purchase_path(item_id: int) -> str:
    return f"{PURCHASE_PREFIX}{item_id}{PURCHASE_SUFFIX}"
