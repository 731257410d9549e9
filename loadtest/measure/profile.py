"""A py-spy sampling profile of a gateway worker, its samples bucketed into the stages of one
202 (by the innermost frame a stage names)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# Stages of one 202, by the first frame (from the leaf up) whose function or file matches; the
# rest is the event loop, the HTTP server and the interpreter ("other").
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("metrics", ("hot_counters.py", "gateway/metrics.py", "RouteStats.observe")),
    ("token verification", ("gateway/auth.py", "gateway/hs256.py", "gateway/tokens.py")),
    ("order id + event encoding", ("kernel/ids.py", "kernel/events.py", "payload_for")),
    ("kafka: produce", ("OrderProducer.send",)),
    ("kafka: delivery poll + reports", ("gateway/producer.py",)),
    ("outbox ack", ("gateway/acks.py", "ack_outbox")),
    ("redis: queue a call", ("AutoPipeline._queue", "AutoPipeline.call", "AutoPipeline.node_of")),
    ("redis: pack + write a batch", ("AutoPipeline._flush", "AutoPipeline._send", "NodeLink.send")),
    ("redis: read + settle replies", ("NodeLink.data_received", "AutoPipeline._answered")),
    ("redis: router + reserver coroutines", ("shard_router/",)),
    ("response: ASGI send (into granian)", ("capture",)),
    ("response: build", ("gateway/responses.py",)),
    ("periodic tasks", ("kernel/periodic.py", "catalog.py", "gateway/outbox.py", "admission.py")),
    ("purchase handler (own code)", ("gateway/purchase.py", "gateway/handoff.py", "items.py")),
    ("app front + route stats", ("gateway/front.py", "gateway/asgi.py", "gateway/observed.py")),
    ("granian's Python glue", ("granian/_futures.py", "granian/asgi.py")),
    ("event loop (uvloop run, callbacks)", ("_spawn_asgi_lifespan_worker", "uvloop", "asyncio/")),
)


def stages(collapsed: Iterable[str]) -> dict[str, float]:
    """py-spy's ``--format raw`` lines (``frame;frame;... count``, root first) as each stage's
    share of the samples."""
    counts: Counter[str] = Counter()
    for line in collapsed:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit() or count == "0":
            continue
        counts[_stage(stack.split(";"))] += int(count)
    total = sum(counts.values())
    return {stage: n / total for stage, n in counts.most_common()} if total else {}


def _stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return "other"
