"""Errors of the shard router. Every one means: Redis could not confirm, answer 503.

It lives in the kernel so that domain code below the router can catch it too. It is the
kernel's only error and hangs straight off Exception: a base above one class would name nothing
that ShardUnavailable does not."""

from __future__ import annotations


class ShardUnavailable(Exception):
    """A shard did not answer within its deadline, is known to be down, or errored."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason
