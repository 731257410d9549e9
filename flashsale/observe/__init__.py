"""Watching a sale and reporting on it: what ``flashsale watch`` and ``flashsale report`` read
(Prometheus's API, the processes' /metrics pages, PostgreSQL and Redis) and how they show it."""
