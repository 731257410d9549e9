"""Errors of the domain, each mapped by the gateway to a 409 with a stable code."""

from __future__ import annotations


class NotReady(Exception):
    """A sale cannot be armed yet (replicas not in sync, scripts missing, orders in flight)."""

    code = "NOT_READY_TO_ARM"
