"""The capacity model: from measured per-unit costs to a fleet. Pure arithmetic, no I/O, so it can
be tested on its own (``tests/loadtest/test_planner.py``) and read in one sitting.

1. Utilisation. Cores run at most at ``headroom`` (0.7) of their capacity, lower if the predicted
   p99 there is above the target. Each path's latency percentiles (p50, p90, p99, p99.9, max) at a
   utilisation are interpolated between the open-loop runs at fractions of one process's maximum
   (50%, 90%; never extrapolated); the p99 of the whole mix is the latency that 1% of all
   requests exceed, each path weighted by its share (with 2% of requests on the reserve path,
   that is about the reserve path's median).
2. Gateway. A request costs the gateway CPU time: ``soldout_us`` on the sold-out path (no I/O),
   ``reserve_us`` on the reserve path (Lua call + Kafka produce): the gateway process's CPU
   seconds per answered request, taken from the open-loop runs at that utilisation (interpolated)
   when measured, since a partly loaded process batches less and pays more per request than a
   saturated one, else from the closed-loop runs. Cores busy = ``rps × (share × soldout_us +
   (1 − share) × reserve_us) / 1e6``; processes = ceil(cores busy ÷ utilisation), one per core.
   Gateways are stateless, so this scales linearly; the checks in bench.md test that claim.
3. Redis. Every reserve-path request makes one reserve call on a shard (borrows, near sell-out
   only, are ignored). A shard is one key tag on one primary, a primary is one core: a hot item
   needs ceil(item calls/s ÷ (one core's pipelined EVALSHA/s × headroom)) shards, the cluster
   needs as many primaries for all items together (each with a replica).
4. Kafka and writers. Every sold unit is one order. Writers = ceil(orders ÷ drain target ÷
   (one writer's orders/s at batch 1,000 × headroom)); partitions ≥ writers (one writer per
   partition at most).
5. Load generators. Workers = ceil(rps ÷ (one worker's measured req/s × headroom)), each on a
   core of its own, plus one master.
6. Balancer tier (when measured: ``python -m loadtest.bench --only balancer``). The balancer answers
   every sold-out request from its map, at ``answer_us`` of its CPU each, and forwards the rest
   at ``forward_us`` each; balancer cores = ceil(that ÷ headroom). The gateways then see only
   the reserve path: gateway cores busy = reserve req/s × ``reserve_us``, at the utilisation
   whose predicted p99 of the mix (the balancer's own 410 latency for the sold-out share) meets
   the target, or at the headroom, the p99 not checked, when no usable latency was committed
   (or only with a generator that lagged). The edge is both together; step 2 is the fleet
   without a balancer tier.
   Redis, writers and load generators are as above; a figure never measured is said so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

HEADROOM = 0.7
Latency = dict[float, float]  # percentile (50, 90, 99, 99.9; 100 = max) -> ms


@dataclass(frozen=True, slots=True)
class Measured:
    value: float
    source: str  # which measured figure it is, for the reasoning


@dataclass(frozen=True, slots=True)
class Target:
    rps: float
    sold_out_share: float
    stock: int
    items: int = 1
    p99_ms: float = 100.0
    headroom: float = HEADROOM
    drain_s: float = 10.0  # every order committed within this long of the first purchase


@dataclass(frozen=True, slots=True)
class BalancerFigures:
    answer_us: Measured  # the balancer's CPU µs per sold-out answered from its map
    forward_us: Measured  # its CPU µs per request it forwards to a gateway
    latency: dict[float, Latency] = field(default_factory=dict)  # its own 410s, open loop
    latency_source: str = ""


@dataclass(frozen=True, slots=True)
class Figures:
    soldout_us: Measured
    reserve_us: Measured
    soldout_latency: dict[float, Latency]  # fraction of one process's maximum -> percentiles
    reserve_latency: dict[float, Latency]
    # None: never measured (the plan says so and sizes the rest).
    redis_ops: Measured | None  # one Redis core, reserve script, pipelined
    writer_rate: Measured | None  # one writer, orders/s at batch 1,000
    loadgen_rps: Measured | None  # one load-generator worker on one core
    latency_source: str = ""
    other_loadgen: Measured | None = None  # another generator's per-process rate, for comparison
    # Gateway CPU µs per request in the open-loop runs: fraction of one process's maximum -> µs.
    soldout_us_at: dict[float, float] = field(default_factory=dict)
    reserve_us_at: dict[float, float] = field(default_factory=dict)
    balancer: BalancerFigures | None = None


@dataclass
class Tier:
    """The edge with a balancer tier: balancers answer sold out, gateways the reserve path."""

    balancer_cores_busy: float = 0.0
    balancer_cores: int = 0
    gateway_cores_busy: float = 0.0
    gateway_utilisation: float = 0.0
    gateway_processes: int = 0
    predicted_p99_ms: float | None = None
    p99_met: bool = True

    @property
    def edge_cores(self) -> int:
        return self.balancer_cores + self.gateway_processes


@dataclass
class Fleet:
    gateway_cores_busy: float = 0.0
    utilisation: float = 0.0
    gateway_processes: int = 0
    predicted_p99_ms: float | None = None
    p99_met: bool = True
    shards_per_item: int = 0
    redis_primaries: int = 0
    writers: int = 0
    kafka_partitions: int = 0
    loadgen_workers: int = 0
    tier: Tier | None = None  # with a balancer tier, when its costs were measured
    missing: list[str] = field(default_factory=list)  # parts not sized: never measured
    reasons: list[str] = field(default_factory=list)


def ceil_div(amount: float, capacity: float) -> int:
    """Units of ``capacity`` needed for ``amount`` (at least 1); a tiny epsilon keeps 3.0000001
    from rounding up to 4."""
    if capacity <= 0:
        raise ValueError("capacity must be positive")
    return max(1, math.ceil(amount / capacity - 1e-9))


def interpolate(points: dict[float, float], x: float) -> float | None:
    """Linear between the measured points, flat outside them (never extrapolated)."""
    if not points:
        return None
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        return points[xs[-1]]
    for lo, hi in zip(xs, xs[1:], strict=False):
        if lo <= x <= hi:
            return points[lo] + (points[hi] - points[lo]) * (x - lo) / (hi - lo)
    return None  # unreachable


def tail(latency: Latency, x: float) -> float:
    """Share of requests slower than ``x`` ms: 1 at 0 ms, linear between known percentiles."""
    points = [(0.0, 1.0)]
    for pct in sorted(latency):
        points.append((max(points[-1][0], latency[pct]), 1 - pct / 100))
    for (x0, t0), (x1, t1) in zip(points, points[1:], strict=False):
        if x < x1:
            return t0 + (t1 - t0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def mix_quantile(parts: Sequence[tuple[float, Latency]], q: float) -> float:
    """The ``q`` quantile of a mix of request kinds, each ``(share, percentiles)``: the latency
    that a share ``1 - q`` of all requests exceeds (bisection on the mixed tail)."""
    total = sum(share for share, _ in parts)
    lo, hi = 0.0, max(max(lat.values()) for _, lat in parts)
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(share / total * tail(lat, mid) for share, lat in parts) > 1 - q:
            lo = mid
        else:
            hi = mid
    return hi


def latency_at(points: dict[float, Latency], u: float) -> Latency | None:
    """A path's percentiles at utilisation ``u``, each interpolated between the fractions."""
    if not points:
        return None
    keys = set.intersection(*(set(lat) for lat in points.values()))
    found: Latency = {}
    for pct in keys:
        value = interpolate({f: lat[pct] for f, lat in points.items()}, u)
        if value is not None:
            found[pct] = value
    return found or None


def mix_p99(f: Figures, share: float, u: float) -> float | None:
    """The p99 over all requests at utilisation ``u``, ``share`` of them on the sold-out path."""
    parts = [
        (weight, lat)
        for weight, lat in (
            (share, latency_at(f.soldout_latency, u)),
            (1 - share, latency_at(f.reserve_latency, u)),
        )
        if lat is not None and weight > 0
    ]
    return mix_quantile(parts, 0.99) if parts else None


def utilisation(f: Figures, target: Target) -> tuple[float, float | None, bool]:
    """(utilisation to run at, predicted p99 there, target met): the headroom, lowered in 1%
    steps down to the lowest measured fraction while the predicted p99 is above the target."""
    u = target.headroom
    lowest = min([*f.soldout_latency, *f.reserve_latency], default=u)
    while True:
        p99 = mix_p99(f, target.sold_out_share, u)
        if p99 is None or p99 <= target.p99_ms:
            return u, p99, True
        if u - 0.01 < lowest - 1e-9:
            return u, p99, False
        u = round(u - 0.01, 2)


def cost_us(closed: Measured, open_loop: dict[float, float], u: float) -> tuple[float, str]:
    """CPU µs per request at utilisation ``u``: the open-loop figure there when measured, else the
    closed-loop one; with where it came from."""
    found = interpolate(open_loop, u)
    if found is None:
        return closed.value, closed.source
    return found, f"open loop at {u:.0%}, interpolated; closed loop: {closed.value:.1f} µs"


def gateway_cores(target: Target, f: Figures, u: float) -> float:
    """Cores of gateway CPU the offered load keeps busy when each runs at utilisation ``u``."""
    per_request_us = (
        target.sold_out_share * cost_us(f.soldout_us, f.soldout_us_at, u)[0]
        + (1 - target.sold_out_share) * cost_us(f.reserve_us, f.reserve_us_at, u)[0]
    )
    return target.rps * per_request_us / 1e6


def shared_cores_rps(server_us: float, machine_us: float, workers: int, cores: int) -> float:
    """Closed-loop req/s of ``workers`` server processes on a machine of ``cores`` cores that the
    load generator (and everything else) shares: the lower of what the workers can serve and what
    the whole machine can do when each request costs ``machine_us`` of CPU in total."""
    return min(workers * 1e6 / server_us, cores * 1e6 / machine_us)


def plan(target: Target, f: Figures) -> Fleet:
    fl = Fleet()
    say = fl.reasons.append
    h = target.headroom
    reserve_rps = target.rps * (1 - target.sold_out_share)
    soldout_rps = target.rps - reserve_rps
    say(
        f"offered {target.rps:,.0f} req/s: {soldout_rps:,.0f} sold-out answers,"
        f" {reserve_rps:,.0f} reach Redis ({1 - target.sold_out_share:.1%})"
    )
    # 1. Utilisation.
    fl.utilisation, fl.predicted_p99_ms, fl.p99_met = utilisation(f, target)
    if fl.predicted_p99_ms is None:
        say("p99: no open-loop measurement; the target p99 is not checked")
    else:
        verdict = "meets" if fl.p99_met else "DOES NOT meet (not improved by more processes)"
        say(
            f"p99 of the mix at {fl.utilisation:.0%} of one process's maximum ≈"
            f" {fl.predicted_p99_ms:.1f} ms ({f.latency_source or 'open loop'}), {verdict} the"
            f" {target.p99_ms:g} ms target"
        )
    # 2. Gateway.
    u = fl.utilisation
    so_us, so_from = cost_us(f.soldout_us, f.soldout_us_at, u)
    re_us, re_from = cost_us(f.reserve_us, f.reserve_us_at, u)
    fl.gateway_cores_busy = gateway_cores(target, f, u)
    fl.gateway_processes = ceil_div(fl.gateway_cores_busy, u)
    say(
        f"gateway CPU: {soldout_rps:,.0f} × {so_us:.1f} µs (sold-out; {so_from})"
        f" + {reserve_rps:,.0f} × {re_us:.1f} µs (reserve; {re_from})"
        f" = {fl.gateway_cores_busy:,.2f} cores busy"
    )
    say(
        f"gateway: {fl.gateway_cores_busy:,.2f} cores ÷ {fl.utilisation:.0%} per core"
        f" = {fl.gateway_processes:,} processes, one per core"
    )
    # 3. Redis.
    if f.redis_ops is None:
        _not_measured(fl, "redis", "Redis", "redis")
    else:
        capacity = f.redis_ops.value * h
        item_calls = reserve_rps / max(1, target.items)
        fl.shards_per_item = min(max(1, target.stock), ceil_div(item_calls, capacity))
        fl.redis_primaries = ceil_div(reserve_rps, capacity)
        say(
            f"Redis: {reserve_rps:,.0f} reserve calls/s; one core does {f.redis_ops.value:,.0f}/s"
            f" ({f.redis_ops.source}), {capacity:,.0f}/s at {h:.0%}"
        )
        say(
            f"  hot item: {item_calls:,.0f} calls/s → {fl.shards_per_item} shard(s);"
            f" cluster: {fl.redis_primaries} primar{'y' if fl.redis_primaries == 1 else 'ies'}"
            " (each with a replica)"
        )
    # 4. Kafka and writers.
    orders = target.stock * max(1, target.items)
    needed = orders / target.drain_s
    if f.writer_rate is None:
        _not_measured(fl, "writers", "writers", "writer")
    else:
        writer_capacity = f.writer_rate.value * h
        fl.writers = ceil_div(needed, writer_capacity)
        fl.kafka_partitions = fl.writers
        say(
            f"writers: {orders:,} orders within {target.drain_s:g} s = {needed:,.0f} orders/s;"
            f" one writer stores {f.writer_rate.value:,.0f}/s ({f.writer_rate.source}),"
            f" {writer_capacity:,.0f}/s at {h:.0%} → {fl.writers} writer(s),"
            f" ≥ {fl.kafka_partitions} partition(s)"
        )
    # 5. Load generators.
    if f.loadgen_rps is None:
        _not_measured(fl, "load", "load", "loadgen")
    else:
        worker_capacity = f.loadgen_rps.value * h
        fl.loadgen_workers = ceil_div(target.rps, worker_capacity)
        say(
            f"load: {target.rps:,.0f} req/s ÷ {worker_capacity:,.0f} req/s per worker"
            f" ({f.loadgen_rps.source}, at {h:.0%}) = {fl.loadgen_workers:,} workers + 1 master"
        )
    if f.other_loadgen is not None:
        other = ceil_div(target.rps, f.other_loadgen.value * h)
        say(
            f"  (with {f.other_loadgen.source} at {f.other_loadgen.value:,.0f} req/s per"
            f" process: {other:,} processes)"
        )
    # 6. Balancer tier.
    if f.balancer is not None:
        fl.tier = balancer_tier(target, f, f.balancer, say)
    return fl


def _not_measured(fl: Fleet, part: str, label: str, section: str) -> None:
    fl.missing.append(part)
    fl.reasons.append(
        f"{label}: no committed result (`.venv/bin/python -m loadtest.bench --only {section}`)"
    )


def balancer_tier(
    target: Target, f: Figures, b: BalancerFigures, say: Callable[[str], None]
) -> Tier:
    """The edge when the balancers answer sold out and the gateways only the reserve path."""
    t = Tier()
    reserve_rps = target.rps * (1 - target.sold_out_share)
    soldout_rps = target.rps - reserve_rps
    t.balancer_cores_busy = (
        soldout_rps * b.answer_us.value + reserve_rps * b.forward_us.value
    ) / 1e6
    t.balancer_cores = ceil_div(t.balancer_cores_busy, target.headroom)
    say(
        f"balancer tier: {soldout_rps:,.0f} sold-out answers × {b.answer_us.value:.1f} µs"
        f" ({b.answer_us.source}) + {reserve_rps:,.0f} forwarded × {b.forward_us.value:.1f} µs"
        f" ({b.forward_us.source}) = {t.balancer_cores_busy:,.2f} cores busy"
        f" → {t.balancer_cores} balancer cores at {target.headroom:.0%}"
    )
    # The sold-out share's latency is now the balancer's own (flat where only one fraction was
    # measured); the reserve path's is the gateway's at its utilisation.
    if b.latency:
        behind = replace(f, soldout_latency=b.latency)
        t.gateway_utilisation, t.predicted_p99_ms, t.p99_met = utilisation(behind, target)
    else:  # never the gateway's own sold-out latency: that is not what buyers would see
        t.gateway_utilisation = target.headroom
    u = t.gateway_utilisation
    re_us, re_from = cost_us(f.reserve_us, f.reserve_us_at, u)
    t.gateway_cores_busy = reserve_rps * re_us / 1e6
    t.gateway_processes = ceil_div(t.gateway_cores_busy, u)
    p99 = "not checked" if t.predicted_p99_ms is None else f"≈ {t.predicted_p99_ms:.1f} ms"
    if b.latency_source:
        p99 += f" ({b.latency_source})"
    say(
        f"  gateways behind it: {reserve_rps:,.0f} × {re_us:.1f} µs (reserve; {re_from})"
        f" = {t.gateway_cores_busy:,.2f} cores busy ÷ {u:.0%} = {t.gateway_processes}"
        f" processes; p99 of the mix {p99}"
        f"{'' if t.p99_met else ' (DOES NOT meet the target)'}"
    )
    say(
        f"  edge: {t.balancer_cores} balancer + {t.gateway_processes} gateway cores ="
        f" {t.edge_cores} cores (without the tier: the gateway line above)"
    )
    return t
