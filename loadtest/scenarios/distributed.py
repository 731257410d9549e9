"""``python -m loadtest.scenarios.distributed``: the spike from several "hosts" through the fleet.

A Locust master and ``--workers`` workers, each in a network namespace of its own (a client host
of the fleet, ``flashsale.fleet.namespaces.clients``: its own address on the fleet's bridge),
send the FlashSaleSpike crowd through the fleet's balancer. Each worker buys from its own buyer
range (``loadtest/scenarios/run.py``: the worker index is bits 26-33 of every buyer id) and the
balancer sees each worker's own source address. Needs a fleet up (``flashsale fleet up``) and
root; the client namespaces are made for the run and deleted after it.

    .venv/bin/flashsale fleet up --gateways 2
    .venv/bin/python -m loadtest.scenarios.distributed --workers 2 --buyers 4000 --units 400

Afterwards: the answers, each worker's orders by buyer range (read back from PostgreSQL), and the
invariants (``rig/invariants.py``) once a writer has stored every 202 (the run starts one
of its own with ``--writer``). Exits 1 when a check fails. Files: ``loadtest/reports/<time>-dist``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import asyncpg

from flashsale.fleet import fleet, namespaces
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import StackError, process_group, run
from kernel.settings import PROJECT_ROOT, Settings, settings
from loadtest.constants import LOCUSTFILE, REPORTS_DIR
from loadtest.scenarios.run import SEQ_BITS, WORKER_BITS
from loadtest.scenarios.spike import LOCUST_GRACE_S, Outcome, Report, parser_of
from rig import admin, invariants
from rig.invariants import Check

MASTER_PORT = 5557


@dataclass(frozen=True)
class DistributedOptions:
    workers: int = 2
    buyers: int = 4000
    units: int = 400
    shards: int = 4
    users: int = 50  # per worker
    duration_s: float = 60.0
    opens_in_s: float = 5.0
    writer: bool = False  # start a writer of our own for the run (else one must be running)
    report_dir: Path | None = None


@dataclass
class DistributedResult(Outcome):
    clients: list[Host] = field(default_factory=list)
    orders_by_worker: dict[int, int] = field(default_factory=dict)


@contextmanager
def client_hosts(cfg: Settings, count: int) -> Iterator[list[Host]]:
    """``count`` client namespaces on the fleet's bridge for the block, deleted after it."""
    hosts = namespaces.clients(cfg, count)
    taken = set(namespaces.existing_namespaces(cfg))
    if any(h.netns in taken for h in hosts):
        raise StackError("client hosts exist already: another distributed run on this fleet?")
    try:
        for host in hosts:
            namespaces.create_host(cfg, host)
        yield hosts
    finally:
        for host in hosts:
            run(["ip", "link", "delete", host.outer], check=False)
            run(["ip", "netns", "delete", host.netns], check=False)


def locust_argv(host: Host, *args: str) -> list[str]:
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    return ["ip", "netns", "exec", host.netns, *locust, *args]


def master_argv(
    opts: DistributedOptions, cfg: Settings, master: Host, item: admin.SaleItem, out: Path
) -> list[str]:
    users = opts.users * opts.workers
    return locust_argv(
        master,
        "FlashSaleSpike", "--master", "--master-bind-host", master.address,
        "--master-bind-port", str(MASTER_PORT), "--expect-workers", str(opts.workers),
        "--headless", "-u", str(users), "-r", str(users),
        "--run-time", f"{opts.duration_s:g}s", "--stop-timeout", "10",
        # Inside a client host, 127.0.0.1:<balancer port> is the balancer (namespaces.py).
        "--host", f"http://127.0.0.1:{cfg.fleet_balancer_port}",
        "--csv", str(out / "spike"), "--only-summary", "--loglevel", "INFO",
        "--item-id", str(item.item_id), "--opens-at", f"{item.opens_at:.3f}",
        "--buyers", str(opts.buyers), "--outcome-file", str(out / "outcome.json"),
    )  # fmt: skip


def worker_argv(worker: Host, master: Host) -> list[str]:
    return locust_argv(
        worker, "--worker", "--master-host", master.address, "--master-port", str(MASTER_PORT)
    )


async def orders_by_worker(cfg: Settings, item_id: int) -> tuple[Counter[int], set[int]]:
    """The item's orders per worker index (from each buyer id), and the run bases seen."""
    conn = await asyncpg.connect(cfg.pg_dsn)
    try:
        rows = await conn.fetch("SELECT user_id FROM flash_sale_order WHERE item_id = $1", item_id)
    finally:
        await conn.close()
    users = [int(r["user_id"]) for r in rows]
    workers = Counter((u >> SEQ_BITS) & (2**WORKER_BITS - 1) for u in users)
    return workers, {u >> (SEQ_BITS + WORKER_BITS) for u in users}


def range_checks(opts: DistributedOptions, workers: Counter[int], bases: set[int]) -> list[Check]:
    mine = set(range(opts.workers))
    return [
        Check(
            "every worker bought, each from its own buyer range",
            set(workers) == mine,
            ", ".join(f"worker {w}: {n} orders" for w, n in sorted(workers.items())) or "none",
        ),
        Check("one run's buyers only", len(bases) == 1, f"{len(bases)} run base(s)"),
    ]


def run_distributed(
    opts: DistributedOptions, cfg: Settings | None = None, out: TextIO = sys.stdout
) -> DistributedResult:
    cfg = cfg or settings()
    report_dir = opts.report_dir or REPORTS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-dist"
    report_dir.mkdir(parents=True, exist_ok=True)
    result = DistributedResult(report_dir)
    report = Report(out)
    if not fleet.current_hosts(cfg) or fleet.balancer(cfg).pid() is None:
        raise StackError("no fleet up: `flashsale fleet up` first")
    base = fleet.balancer_url(cfg)
    with ExitStack() as stack:
        if opts.writer:
            writer_log = report_dir / "writer.log"
            argv = [sys.executable, "-m", "writer", "--metrics-port", "0"]
            stack.enter_context(process_group(argv, log=writer_log))
        item = admin.create_sale(  # the public edge serves buyer routes only
            fleet.operator_url(cfg),
            cfg,
            units=opts.units,
            shards=opts.shards,
            opens_at=time.time() + opts.opens_in_s,
        )
        result.item_id = item.item_id
        hosts = stack.enter_context(client_hosts(cfg, opts.workers + 1))
        result.clients = hosts
        master, workers = hosts[0], hosts[1:]
        report.say(
            f"distributed: item {item.item_id} ({item.units} units / {item.shards} shards);"
            f" master on {master.netns} ({master.address}), workers on "
            + ", ".join(f"{w.netns} ({w.address})" for w in workers)
            + f", through {base}"
        )
        for n, worker in enumerate(workers):
            log = report_dir / f"worker-{n + 1}.log"
            stack.enter_context(process_group(worker_argv(worker, master), log=log))
        argv = master_argv(opts, cfg, master, item, report_dir)
        with open(report_dir / "master.log", "w") as master_log:
            code = run_master(argv, master_log, opts.duration_s + LOCUST_GRACE_S)
        if not result.read(cfg, report, "distributed"):
            result.checks = [Check("Locust ran", False, f"master exit {code}; see master.log")]
            return result
        per_worker, bases = asyncio.run(orders_by_worker(cfg, item.item_id))
        result.orders_by_worker = dict(per_worker)
        result.checks += range_checks(opts, per_worker, bases)
    report.say(invariants.render(result.checks))
    report.say(f"distributed: {'PASS' if result.passed else 'FAIL'}")
    report.write(report_dir / "report.txt")
    return result


def run_master(argv: list[str], log: TextIO, timeout_s: float) -> int:
    """The master to its end (every worker's crowd through, or the run time out)."""
    try:
        done = subprocess.run(
            argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return -1
    return done.returncode


FLAGS = (
    ("--workers", "workers", "Locust workers, a host each"),
    ("--buyers", "buyers", "the crowd, over all workers"),
    ("--units", "units", None),
    ("--shards", "shards", None),
    ("--users", "users", "Locust users per worker"),
    ("--duration", "duration_s", "at most (s)"),
    ("--writer", "writer", "start a writer for the run"),
)


def main(argv: list[str] | None = None) -> int:
    prog = "python -m loadtest.scenarios.distributed"
    p = parser_of(prog, __doc__, DistributedOptions(), FLAGS, "<timestamp>-dist")
    a = p.parse_args(argv)
    if not 1 <= a.workers <= 29:
        p.error("--workers: between 1 and 29 (client hosts .221-.250, one for the master)")
    opts = DistributedOptions(
        **{name: getattr(a, name) for _, name, _ in FLAGS}, report_dir=a.report_dir
    )
    return 0 if run_distributed(opts).passed else 1


if __name__ == "__main__":
    sys.exit(main())
