"""The paths the front treats apart, in one place: the purchase route's (the front serves it,
the sold-out flags index it), a waiting room's queue (the front serves its polls) and the
probes' (admission skips them)."""

from __future__ import annotations

PURCHASE_PREFIX = "/api/flash-sales/items/"
PURCHASE_SUFFIX = "/purchase"
QUEUE_PREFIX = "/api/flash-sales/sales/"
QUEUE_SUFFIX = "/queue"
# Never refused by admission: a probe that failed under load would take a busy process out of
# its load balancer and pile its share onto the others, and a refused scrape would hide the
# overload from Prometheus exactly then. (/readyz and /metrics have their own rate limit.)
UNGATED = frozenset({"/healthz", "/readyz", "/metrics"})


def purchase_path(item_id: int) -> str:
    return f"{PURCHASE_PREFIX}{item_id}{PURCHASE_SUFFIX}"
