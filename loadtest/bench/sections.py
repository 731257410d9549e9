"""The sections of ``python -m loadtest.bench``, one registry: each a name, the title of its part
of bench.md, its typed options (a dataclass whose fields are its command-line flags,
``--<section>-<field>``), the tools it needs, how it measures (into a ``Recorder``, returning the
settings it ran with) and how its part of bench.md is rendered from the committed results.

Every section shares the harness's options (``--duration``, ``--repeats``, the connections,
the cores); ``--quick`` shrinks both those and, per section, its own (``Spec.quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loadtest.bench import (
    balancer,
    failover,
    fullspike,
    loadgen,
    overload,
    phases,
    reserve_speed,
    room,
    starvation,
    techniques,
    voucher_load,
    wait_cost,
    writer_load,
)
from loadtest.bench import results as store
from loadtest.bench.context import Context
from loadtest.bench.report import http as report_http
from loadtest.bench.report import pipeline as report_pipeline
from loadtest.bench.report import techniques as report_techniques

Got = Mapping[str, store.Section]


@dataclass(frozen=True)
class Spec:
    name: str
    title: str
    measure: Callable[[Context, Any, store.Recorder], dict[str, Any]]
    render: Callable[[Got], list[str]]
    tools: tuple[str, ...] = ()
    options: type | None = None  # a dataclass with a default for every field
    compares: bool = False  # measures every ``--compare`` tree beside the current code
    quick: Mapping[str, Any] = field(default_factory=dict)  # its options under --quick


def add_flags(p: argparse.ArgumentParser, spec: Spec) -> None:
    """``--<section>-<field>`` for every field of the section's options."""
    if spec.options is None:
        return
    group = p.add_argument_group(f"section {spec.name}")
    for f in dataclasses.fields(spec.options):
        flag = f"--{spec.name}-{f.name}".replace("_", "-")
        dest = f"{spec.name}__{f.name}"
        helps = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            group.add_argument(
                flag, dest=dest, action=argparse.BooleanOptionalAction, default=f.default,
                help=helps,
            )  # fmt: skip
        else:
            kind = type(f.default)
            group.add_argument(
                flag, dest=dest, type=kind, default=f.default, help=helps, metavar=kind.__name__
            )


def options_of(args: argparse.Namespace, spec: Spec) -> Any:
    """The section's options from the parsed command line (None: it has none of its own)."""
    if spec.options is None:
        return None
    names = (f.name for f in dataclasses.fields(spec.options))
    given = {n: getattr(args, f"{spec.name}__{n}") for n in names}
    return spec.options(**{**given, **(spec.quick if args.quick else {})})


def _part(render: Callable[[store.Section], list[str]], name: str) -> Callable[[Got], list[str]]:
    return lambda got: render(got[name])


SECTIONS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "closed", "(a) sold-out and (b) reserve path, closed loop", phases.closed,
            _part(report_http.closed, "closed"), ("wrk", "taskset", "nginx"),
        ),
        Spec(
            "open", "latency at fixed offered rates", phases.open_loop,
            _part(report_http.open_loop, "open"), ("taskset", "nginx"), phases.OpenOptions,
        ),
        Spec(
            "redis", "(c) Redis, one core", phases.redis, _part(report_http.redis, "redis"),
            ("taskset", "redis-benchmark", "redis-server"),
        ),
        Spec(
            "scaling", "1 vs 2 gateway processes", phases.scaling,
            _part(report_http.scaling, "scaling"), ("wrk", "taskset"),
        ),
        Spec(
            "writer", "writer", writer_load.section, _part(report_pipeline.writer, "writer"), (),
            writer_load.WriterOptions, quick={"orders": 5_000, "orders_at_1": 500},
        ),
        Spec(
            "spike", "full spike", fullspike.measure,
            lambda got: report_pipeline.spike(got["spike"], got.get("closed")),
            ("wrk", "taskset"), fullspike.SpikeOptions, quick={"units": 2_000, "buyers": 40_000},
        ),
        Spec(
            "techniques", "anti-oversell techniques", techniques.measure,
            _part(report_techniques.techniques, "techniques"), ("taskset",),
            techniques.TechniquesOptions, quick={"attempts": 2_000},
        ),
        Spec(
            "vouchers", "vouchers", voucher_load.section,
            _part(report_pipeline.vouchers, "vouchers"),
        ),
        Spec(
            "loadgen", "load generators", loadgen.measure,
            lambda got: report_pipeline.loadgen(got["loadgen"], got.get("closed")),
            ("taskset", "nginx"),
        ),
        Spec(
            "balancer", "The balancer answering sold out", balancer.measure,
            _part(balancer.render, "balancer"), ("wrk", "taskset", "nginx", "haproxy"),
            balancer.BalancerOptions,
        ),
        Spec(
            "reserve_speed", "The reserve path, code trees side by side", reserve_speed.measure,
            _part(reserve_speed.render, "reserve_speed"), ("wrk", "taskset", "nginx"),
            reserve_speed.SpeedOptions, compares=True,
        ),
        Spec(
            "overload", "Overload: 2×, 5×, 10× one gateway's maximum", overload.measure,
            _part(overload.render, "overload"), ("wrk", "taskset", "nginx", "haproxy"),
            overload.OverloadOptions,
        ),
        Spec(
            "failover", "Redis Cluster failover against its settings", failover.run,
            _part(failover.render, "failover"), ("redis-server",), failover.FailoverOptions,
        ),
        Spec(
            "room", "The waiting room: joins and polls beside the sold-out path", room.measure,
            _part(room.render, "room"), ("wrk", "taskset"), room.RoomOptions,
        ),
        Spec(
            "starvation", "Connection starvation: the same load with and without an attack",
            starvation.measure, _part(starvation.render, "starvation"), ("taskset", "haproxy"),
            starvation.StarvationOptions,
        ),
        Spec(
            "wait_cost", "Cost of waiting for the replica (WAIT) on the reserve path",
            wait_cost.measure, _part(wait_cost.render, "wait_cost"), (), wait_cost.WaitOptions,
        ),
    )
}  # fmt: skip
