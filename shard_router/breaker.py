"""Stop sending to a node that keeps timing out until it answers again.

After ``threshold`` consecutive failures a node is open (calls fail fast) for ``cooldown_s``;
then one call is let through as a probe, and a success closes it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class _State:
    failures: int = 0
    open_until: float = 0.0


@dataclass(slots=True)
class Breaker:
    threshold: int
    cooldown_s: float
    _nodes: dict[str, _State] = field(default_factory=dict)

    def allow(self, node: str) -> bool:
        state = self._nodes.get(node)
        if state is None or state.failures < self.threshold:
            return True
        now = time.monotonic()
        if now >= state.open_until:
            # Half-open: let this call probe, hold the others back for another cooldown.
            state.open_until = now + self.cooldown_s
            return True
        return False

    def success(self, node: str) -> None:
        state = self._nodes.get(node)
        if state is not None:
            state.failures = 0

    def failure(self, node: str) -> None:
        state = self._nodes.setdefault(node, _State())
        state.failures += 1
        if state.failures >= self.threshold:
            state.open_until = time.monotonic() + self.cooldown_s

    def open_nodes(self) -> list[str]:
        return [n for n, s in self._nodes.items() if s.failures >= self.threshold]
