"""The whole system as an operator runs it, for the fault matrix (docs/reliability.md): gateways,
a writer, the expiry job and a continuous reconciliation (``flashsale reconcile --every``, when the
command has it; the checker reconciles at the end either way), each a process of its own.

    with System(cfg, "redis-kill", port=18411) as system:
        sale = system.sale(quantity=2600, shards=4)
        load = system.load(sale, rate=200, duration_s=14)
        load.sleep_until(4); ...inject the fault...
        report = system.check(sale, load.result())
    print(report.line()); report.assert_kept()

The checker (rig/invariants.py) runs after the writer has drained: stored orders within the
quantity, every 202 a stored order that is not FAILED, per shard units left + holds = units
loaded, no 5xx but 503 with Retry-After, every request answered within its deadline.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from flashsale.stack.processes import (
    http_ready,
    settings_env,
    spawn_group,
    stop_group,
    wait_ready,
    wait_until,
)
from kernel.settings import PROJECT_ROOT, Settings
from rig.invariants import (
    Answered,
    Answers,
    Check,
    check_run,
    render,
    units_loaded,
    wait_for_caught_up,
)
from rig.pressure import PRESSURED, CpuPressure
from rig.sale import LIFTED_IP_LIMITS
from tests.support.constants import DRAIN_MS, QUICK_RELAY, REDIS_TIMEOUT_MS
from tests.support.gateway import new_sale
from tests.support.system_load import Answer, OpenLoad

READY_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 40.0  # bounded: a 202 that is never stored must fail a row, not stall it
BACKLOG_TIMEOUT_S = 300.0  # earlier work's orders, at the writer's thousands a second
SLACK_S = 0.5  # scheduling on a shared 2-core box, on top of a request's deadline
RECONCILE_EVERY_S = 2
OPENS_IN_S = 1
Popen = subprocess.Popen[bytes]
_buyers = itertools.count(uuid.uuid4().int % 10**9 * 10**5 + 6 * 10**14, 10**5)


def fresh_buyers(count: int) -> list[int]:
    """User ids no load or test has used (blocks of 10^5; a load takes one block)."""
    assert count <= 10**5
    first = next(_buyers)
    return list(range(first, first + count))


def request_deadline_s(cfg: Settings) -> float:
    """A purchase's budget: its Redis calls' deadline, then the Kafka acknowledgement's."""
    return (REDIS_TIMEOUT_MS + cfg.kafka_timeout_ms) / 1000


@functools.cache
def continuous_reconcile() -> bool:
    """Does ``flashsale reconcile`` have ``--every`` (continuous reconciliation)?"""
    shown = subprocess.run(
        [sys.executable, "-m", "flashsale", "reconcile", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=PROJECT_ROOT,
    )
    return "--every" in shown.stdout


@dataclass(frozen=True, slots=True)
class GatewaySpec:
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the system's env
    prefix: Sequence[str] = ()  # argv before python, e.g. ("faketime", "-f", "+30s")


@dataclass(frozen=True, slots=True)
class Sale:
    item_id: int
    quantity: int
    loaded: list[int]  # units per shard right after arming
    starts_at: float  # epoch seconds (to within the milliseconds new_sale takes)


@dataclass(frozen=True, slots=True)
class Report:
    row: str
    answers: list[Answer]
    statuses: Counter[int]
    orders: int
    failed: int
    drift: int
    checks: list[Check]
    cpu_pressure: float | None = None  # rig.pressure's share from the first load to the check

    @property
    def pressured(self) -> bool:
        """Was the machine too starved of CPU for a latency bound to mean anything?"""
        return self.cpu_pressure is not None and self.cpu_pressure >= PRESSURED

    @property
    def worst_latency_s(self) -> float:
        return max((a.latency_s for a in self.answers), default=0.0)

    def line(self) -> str:
        s = self.statuses
        others = {k: v for k, v in sorted(s.items()) if k not in (202, 410, 503)}
        codes = dict(Counter(a.error for a in self.answers if a.status == 503))
        lost = dict(Counter(a.error for a in self.answers if a.status == 0))
        return (
            f"ROW {self.row}: requests {len(self.answers)}, 202 {s[202]}, 410 {s[410]},"
            f" 503 {s[503]} {codes}, other {others}{f' {lost}' if lost else ''},"
            f" orders {self.orders}, FAILED {self.failed},"
            f" drift {self.drift}, worst latency {self.worst_latency_s:.2f}s,"
            f" resent after a closed keep-alive {sum(a.resent for a in self.answers)},"
            + ("" if self.cpu_pressure is None else f" CPU pressure {self.cpu_pressure:.0%},")
            + (" PASS" if self.passed else " FAIL")
        )

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def assert_kept(self) -> None:
        assert self.passed, f"{self.line()}\n{render(self.checks)}"


class System:
    def __init__(
        self,
        cfg: Settings,
        row: str,
        *,
        port: int,
        gateways: Sequence[GatewaySpec] = (GatewaySpec(),),
        env: Mapping[str, str] | None = None,
        writer_env: Mapping[str, str] | None = None,
        writer: bool = True,
    ) -> None:
        """``env`` for every process, ``writer_env`` for the first writer only (a failpoint);
        ``writer=False``: the test starts the writer (``start_writer``) when it wants one."""
        self.cfg = cfg
        self.row = row
        self.env = dict(env or {})
        self.specs = list(gateways)
        self.bases = [f"http://{cfg.gateway_host}:{port + i}" for i in range(len(self.specs))]
        self.deadline_s = request_deadline_s(cfg)
        self._writer_env = dict(writer_env or {})
        self._pressure: CpuPressure | None = None
        self._with_writer = writer
        self._gateways: list[Popen | None] = [None] * len(self.specs)
        self._jobs: dict[str, Popen] = {}

    # --- processes

    def _spawn(self, role: str, argv: Sequence[str], env: Mapping[str, str]) -> Popen:
        log = self.cfg.log_dir / f"faults-{self.row}-{role}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        return spawn_group(argv, log=log, env={**self.env, **env})

    def start_gateway(self, i: int, env: Mapping[str, str] | None = None) -> None:
        self.stop_gateway(i)  # reaps one that died
        spec = self.specs[i]
        port = int(self.bases[i].rsplit(":", 1)[1])
        own = settings_env(
            gateway_port=port,
            redis_timeout_ms=REDIS_TIMEOUT_MS,
            gateway_drain_delay_ms=DRAIN_MS,
            **LIFTED_IP_LIMITS,
            **QUICK_RELAY,
        )
        argv = [*spec.prefix, sys.executable, "-m", "gateway"]
        # The system's own env (a row's settings) overrides these defaults, as the spec's does.
        proc = self._spawn(f"gateway{i}", argv, {**own, **self.env, **spec.env, **(env or {})})
        self._gateways[i] = proc
        wait_ready(proc, http_ready(f"{self.bases[i]}/readyz"), READY_TIMEOUT_S, f"gateway {i}")

    def wait_gateway_exit(self, i: int, timeout_s: float) -> bool:
        """Did gateway ``i`` exit (a failpoint, say) within the time?"""
        proc = self._gateways[i]
        return proc is None or wait_until(lambda: proc.poll() is not None, timeout_s)

    def stop_gateway(self, i: int) -> None:
        proc, self._gateways[i] = self._gateways[i], None
        if proc is not None:
            stop_group(proc)

    def start_writer(self, env: Mapping[str, str] | None = None) -> Popen:
        """A writer (stopping the one running first), with ``env`` on top of the system's."""
        if (running := self._jobs.get("writer")) is not None:
            stop_group(running)
        argv = [sys.executable, "-m", "writer", "--metrics-port", "0"]
        self._jobs["writer"] = self._spawn("writer", argv, env or {})
        return self._jobs["writer"]

    def _start_jobs(self) -> None:
        flashsale = [sys.executable, "-m", "flashsale"]
        self._jobs["expiry"] = self._spawn("expiry", [*flashsale, "expiry"], {})
        if continuous_reconcile():
            # Each round repairs what is safe on a live item (it refuses --fix, which is more).
            argv = [*flashsale, "reconcile", "--every", str(RECONCILE_EVERY_S)]
            # Its /metrics on a free port: the shared stack's reconcile may hold the default.
            env = settings_env(reconcile_metrics_port=0)
            self._jobs["reconcile"] = self._spawn("reconcile", argv, env)

    def __enter__(self) -> System:
        for old in self.cfg.log_dir.glob(f"faults-{self.row}-*.log"):
            old.unlink()  # a row's logs are its last run's
        try:
            if self._with_writer:
                self.start_writer(self._writer_env)
                # A backlog on the orders topic (a benchmark's, a test's that ran no writer) is
                # this writer's first work: the row's drain must time its own orders only.
                backlog = asyncio.run(wait_for_caught_up(self.cfg, BACKLOG_TIMEOUT_S))
                if backlog:
                    print(f"\n  the writer first caught up with {backlog} earlier orders")
            self._start_jobs()
            for i in range(len(self.specs)):
                self.start_gateway(i)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for i in range(len(self.specs)):
            self.stop_gateway(i)
        for proc in self._jobs.values():
            stop_group(proc)
        self._jobs.clear()

    # --- the sale, the load, the verdict

    def sale(self, quantity: int, shards: int, *, opens_in_s: int = OPENS_IN_S) -> Sale:
        """A sale of one item, armed before it opens (arming an open sale is refused), and
        waited for when it opens within a few seconds."""
        starts_at = time.time() + opens_in_s
        created = new_sale(self.bases[0], quantity, shards, opens_in_s=opens_in_s)
        item_id = int(created["items"][0]["itemId"])
        sale = Sale(item_id, quantity, units_loaded(self.cfg, item_id, shards), starts_at)
        if opens_in_s <= OPENS_IN_S:
            time.sleep(max(0.0, starts_at - time.time() + 0.05))
        return sale

    def load(
        self,
        sale: Sale,
        *,
        rate: float,
        duration_s: float,
        targets: Sequence[int] | None = None,
    ) -> OpenLoad:
        """Start the open-loop load on the gateways ``targets`` (default: all of them)."""
        chosen = [
            self.bases[i] for i in (targets if targets is not None else range(len(self.bases)))
        ]
        if self._pressure is None:
            self._pressure = CpuPressure()  # from the first load to the checker
        return OpenLoad(
            self.cfg,
            chosen,
            sale.item_id,
            first_buyer=fresh_buyers(1)[0],
            rate=rate,
            duration_s=duration_s,
            deadline_s=self.deadline_s + SLACK_S,
        ).start()

    def check(
        self,
        sale: Sale,
        answers: list[Answer],
        *,
        calm_until_s: float | None,
        accepted: set[str] | None = None,
        excused: Callable[[Answered], bool] = lambda _a: False,
    ) -> Report:
        """Drain, then the checker; ``accepted`` adds 202s got outside the load. Before
        ``calm_until_s`` (the fault, on the load's clock) the sale must sell as usual: a row in
        which nothing sold would otherwise keep every invariant."""
        got = {a.order_id for a in answers if a.status == 202 and a.order_id}
        pressure = None if self._pressure is None else self._pressure.share()
        run = check_run(
            self.cfg,
            [sale.item_id],
            got | (accepted or set()),
            loaded={sale.item_id: sale.loaded},
            answers=Answers(answers, self.deadline_s + SLACK_S, excused, pressure),
            drain_timeout_s=DRAIN_TIMEOUT_S,
        )
        statuses = Counter(a.status for a in answers)
        checks = [self._still_running(), *run.checks]
        if calm_until_s is not None:
            # Answered before the fault: a request in flight when it struck may meet it.
            checks.insert(1, _calm([a for a in answers if a.done_s < calm_until_s], pressure))
        return Report(
            self.row, answers, statuses, run.orders, run.failed, run.drift, checks, pressure
        )

    def _still_running(self) -> Check:
        """A process that died on its own (a crash at start, say) is a failure of the row."""
        procs = {f"gateway {i}": p for i, p in enumerate(self._gateways) if p is not None}
        procs.update(self._jobs)
        exited = {name: p.poll() for name, p in procs.items() if p.poll() is not None}
        detail = f"exited: {exited}" if exited else ", ".join(sorted(procs)) + " running"
        return Check("every process of the system still runs", not exited, detail)


def _calm(before: list[Answer], pressure: float | None) -> Check:
    """Before the fault: 202 (or 410 once sold out), and at most load shed (503 OVERLOADED).
    On a machine under CPU pressure (rig.pressure) a missed Redis or Kafka deadline (503
    UNAVAILABLE, with Retry-After) is timing, not the fault: counted and shown, not failed."""
    usual = {"202", "410", "503 OVERLOADED"}
    pressured = pressure is not None and pressure >= PRESSURED
    if pressured:
        usual.add("503 UNAVAILABLE")
    seen = Counter(a.label for a in before)
    odd = {label: n for label, n in seen.items() if label not in usual}
    ok = bool(seen["202"]) and not odd
    due = sorted(round(a.due_s, 2) for a in before if a.label in odd)
    when = f", the others due at {due[:10]} s" if due else ""
    shed = f"; UNAVAILABLE allowed at CPU pressure {pressure:.0%}" if pressured else ""
    return Check("sold as usual before the fault", ok, f"answers then: {dict(seen)}{when}{shed}")
