"""``python -m loadtest.scenarios.spike``: the flash-sale spike on the local stack, in one command.

Starts a gateway (granian, pinned to ``--server-core``, the per-IP limit lifted: all the load
comes from 127.0.0.1) and a writer on ports 18400-18499, creates and arms a sale, releases the
FlashSaleSpike crowd with Locust, headless, on ``--load-core``, then prints the answer counts
and percentiles, waits for the writer to drain, checks the invariants against PostgreSQL and
Redis, and plots latency and throughput over time. Exits 1 when a check fails.

Everything lands in ``loadtest/reports/<timestamp>/``: report.txt, spike.png, Locust's CSVs and
HTML report, outcome.json (answers and every 202's orderId), and the servers' and Locust's logs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from flashsale.stack.processes import settings_env
from kernel.settings import PROJECT_ROOT, Settings, settings
from loadtest.bench import servers
from loadtest.constants import LOCUSTFILE, REPORTS_DIR, SPIKE_PORTS
from loadtest.scenarios import plot
from rig import admin, invariants
from rig.invariants import Check
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS

GATEWAY_ENV = settings_env(**LIFTED_IP_LIMITS)
LOCUST_GRACE_S = 90.0  # beyond --duration: start-up, the stop timeout, writing the reports


@dataclass(frozen=True)
class SpikeOptions:
    buyers: int = 20_000
    units: int = 2_000
    shards: int = 4
    users: int = 500
    duration_s: float = 120.0
    opens_in_s: float = 5.0
    pay_share: float = 0.5
    polls: int = 3
    processes: int = 1
    server_core: int = 0
    load_core: int = 1 if (os.cpu_count() or 1) > 1 else 0
    drain_timeout_s: float = invariants.DRAIN_TIMEOUT_S
    report_dir: Path | None = None


@dataclass
class Outcome:
    """A Locust run and what was checked of it: its outcome file, the checks of its answers and
    of the invariants; it passed when every check did."""

    report_dir: Path
    item_id: int = 0
    outcome: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def read(self, cfg: Settings, report: Report, name: str, **drain: float) -> bool:
        """The outcome file Locust wrote, its answers printed, then the checks: the answers, and
        the invariants once the writer has stored every 202; False when there is no file."""
        path = self.report_dir / "outcome.json"
        if not path.exists():
            return False
        self.outcome = json.loads(path.read_text())
        print_answers(report, self.outcome)
        accepted = self.outcome["accepted"]
        report.say(f"{name}: waiting for the writer to store {len(accepted)} orders...")
        found = invariants.check_invariants(cfg, [self.item_id], accepted, **drain)
        self.checks = answer_checks(self.outcome) + found
        return True


@dataclass
class SpikeResult(Outcome):
    plot: Path | None = None


class Report:
    """Prints, and keeps the lines for report.txt."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lines: list[str] = []

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)
        self.lines.append(line)

    def write(self, path: Path) -> None:
        path.write_text("\n".join(self.lines) + "\n")


def _log_says(path: Path, marker: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return marker in path.read_text(errors="replace")
        except FileNotFoundError:
            return False

    return ready


@contextmanager
def stack_servers(cfg: Settings, report_dir: Path, core: int) -> Iterator[str]:
    """A gateway and a writer of our own for the run; yields the gateway's base URL."""
    port = free_port(set(), SPIKE_PORTS)
    base = f"http://127.0.0.1:{port}"
    env = {**GATEWAY_ENV, **settings_env(gateway_port=port)}
    writer_argv = [sys.executable, "-m", "writer", "--metrics-port", "0"]
    writer_ready = _log_says(report_dir / "writer.log", f"writer: {cfg.orders_topic} -> ")
    with ExitStack() as stack:
        stack.enter_context(servers.running("writer", writer_argv, writer_ready, report_dir, core))
        gateway_ready = servers.http_ready(f"{base}/readyz", 200)
        gateway_argv = servers.gateway_argv(port)
        stack.enter_context(
            servers.running("gateway", gateway_argv, gateway_ready, report_dir, core, env)
        )
        yield base


def locust_argv(opts: SpikeOptions, base: str, item: admin.SaleItem, report_dir: Path) -> list[str]:
    argv = [
        sys.executable, "-m", "locust",
        "-f", str(LOCUSTFILE), "FlashSaleSpike",
        "--headless", "-u", str(opts.users), "-r", str(opts.users),
        "--run-time", f"{opts.duration_s:g}s", "--stop-timeout", "10",
        "--host", base,
        "--csv", str(report_dir / "spike"), "--csv-full-history",
        "--html", str(report_dir / "spike.html"),
        "--only-summary", "--loglevel", "INFO",
        "--item-id", str(item.item_id), "--opens-at", f"{item.opens_at:.3f}",
        "--buyers", str(opts.buyers), "--pay-share", f"{opts.pay_share:g}",
        "--polls", str(opts.polls),
        "--outcome-file", str(report_dir / "outcome.json"), "--progress",
    ]  # fmt: skip
    if opts.processes > 1:
        return [*argv, "--processes", str(opts.processes)]  # spread over every core
    return servers.pinned(opts.load_core, argv)


def run_locust(argv: list[str], log_path: Path, timeout_s: float, out: TextIO) -> int:
    """Run Locust, its output to ``log_path``, its PROGRESS lines as one live line on ``out``."""
    live = out.isatty()
    last_shown = 0.0
    with (
        log_path.open("w") as log,
        subprocess.Popen(
            argv, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        deadline = time.monotonic() + timeout_s
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("PROGRESS "):
                text = "  " + line[len("PROGRESS ") :].rstrip()
                if live:
                    print(f"\r{text[:160]:<160}", end="", file=out, flush=True)
                elif time.monotonic() - last_shown >= 5:
                    print(text, file=out, flush=True)
                    last_shown = time.monotonic()
            else:
                log.write(line)
            if time.monotonic() > deadline:
                proc.kill()
                break
        code = proc.wait()
    if live:
        print(file=out)
    return code


def answer_checks(outcome: dict[str, Any]) -> list[Check]:
    """What the scenario's own checks found, and the 5xx rule."""
    failures = outcome.get("failures", [])
    failed = sum(f["occurrences"] for f in failures)
    detail = "; ".join(f"{f['occurrences']} x {f['name']}: {f['error']}" for f in failures[:4])
    bad_5xx = {
        row["name"]: row["requests"]
        for row in outcome.get("answers", [])
        if len(row["name"].split()) > 1
        and row["name"].split()[1].isdigit()
        and int(row["name"].split()[1]) >= 500
        and int(row["name"].split()[1]) != 503
    }
    return [
        Check("answers as the scenario expects", failed == 0, detail or "no failed check"),
        Check(
            "no 5xx except 503 with Retry-After",
            not bad_5xx and "without Retry-After" not in detail,
            ", ".join(f"{n}: {c}" for n, c in bad_5xx.items()) or "none",
        ),
    ]


def print_answers(report: Report, outcome: dict[str, Any]) -> None:
    report.say("answers (Locust, closed loop; ms)")
    report.say(
        f"  {'answer':<34} {'count':>8} {'failed':>7} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}"
    )
    for row in outcome.get("answers", []):
        report.say(
            f"  {row['name']:<34} {row['requests']:>8} {row['failures']:>7} "
            f"{row['p50_ms']:>7.0f} {row['p95_ms']:>7.0f} {row['p99_ms']:>7.0f} "
            f"{row['max_ms']:>7.0f}"
        )
    counts = outcome.get("purchase_counts", {})
    report.say("purchase answers   " + "  ".join(f"{k}: {v}" for k, v in counts.items()))


def run(opts: SpikeOptions, cfg: Settings | None = None, out: TextIO = sys.stdout) -> SpikeResult:
    """The whole spike; the result carries the checks (also printed) and the plot's path."""
    cfg = cfg or settings()
    report_dir = opts.report_dir or REPORTS_DIR / time.strftime("%Y%m%d-%H%M%S")
    report_dir.mkdir(parents=True, exist_ok=True)
    result = SpikeResult(report_dir)
    report = Report(out)
    report.say(f"spike: report in {report_dir}")
    with stack_servers(cfg, report_dir, opts.server_core) as base:
        report.say(f"spike: gateway {base} and a writer up (core {opts.server_core})")
        item = admin.create_sale(
            base, cfg, units=opts.units, shards=opts.shards, opens_at=time.time() + opts.opens_in_s
        )
        result.item_id = item.item_id
        report.say(
            f"spike: sale {item.sale_id} armed: item {item.item_id}, {item.units} units over "
            f"{item.shards} shards, opens in {item.opens_at - time.time():.1f}s; "
            f"{opts.buyers} buyers through {opts.users} Locust users"
        )
        argv = locust_argv(opts, base, item, report_dir)
        code = run_locust(argv, report_dir / "locust.log", opts.duration_s + LOCUST_GRACE_S, out)
        if not result.read(cfg, report, "spike", drain_timeout_s=opts.drain_timeout_s):
            report.say(f"spike: Locust exited {code} without results; see {report_dir}/locust.log")
            result.checks = [Check("Locust ran", False, f"exit {code}")]
            report.write(report_dir / "report.txt")
            return result
    history = report_dir / "spike_stats_history.csv"
    if history.exists():
        title = (
            f"spike: {opts.buyers} buyers, {opts.units} units / {opts.shards} shards, "
            f"{opts.users} users (item {item.item_id})"
        )
        result.plot = plot.plot_history(history, report_dir / "spike.png", title)
    report.say("invariants")
    report.say(invariants.render(result.checks))
    report.say(f"plot     {result.plot or 'none (no stats history)'}")
    report.say(f"spike: {'PASS' if result.passed else 'FAIL'}")
    report.write(report_dir / "report.txt")
    return result


# The command line: (flag, SpikeOptions field, help), each flag's default and type the field's.
FLAGS = (
    ("--buyers", "buyers", "distinct buyers in the crowd"),
    ("--units", "units", "units on sale"),
    ("--shards", "shards", "stock shards of the item"),
    ("--users", "users", "concurrent Locust users"),
    (
        "--duration",
        "duration_s",
        "at most this many seconds of load (the run ends when the crowd is through)",
    ),
    ("--opens-in", "opens_in_s", "the sale opens this many seconds after it is armed"),
    ("--pay-share", "pay_share", "winners who pay"),
    ("--polls", "polls", "status polls per winner"),
    ("--processes", "processes", "Locust processes (a master and workers; >1 is not pinned)"),
    ("--server-core", "server_core", None),
    ("--load-core", "load_core", None),
    ("--drain-timeout", "drain_timeout_s", None),
)


def parser_of(
    prog: str,
    doc: str | None,
    defaults: object,
    flags: Sequence[tuple[str, str, str | None]],
    reports: str = "<timestamp>",
) -> argparse.ArgumentParser:
    """A command line of ``flags`` (flag, field of ``defaults``, help), each with the field's
    default and type (a bool one a switch), and ``--report-dir`` (``loadtest/reports/<reports>``
    if not given)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for flag, name, text in flags:
        default = getattr(defaults, name)
        if isinstance(default, bool):
            parser.add_argument(flag, dest=name, action="store_true", help=text)
            continue
        metavar = flag[2:].upper().replace("-", "_")
        parser.add_argument(
            flag, dest=name, metavar=metavar, type=type(default), default=default, help=text
        )
    parser.add_argument("--report-dir", type=Path, help=f"default loadtest/reports/{reports}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = parser_of("python -m loadtest.scenarios.spike", __doc__, SpikeOptions(), FLAGS)
    args = parser.parse_args(argv)
    opts = SpikeOptions(
        **{name: getattr(args, name) for _, name, _ in FLAGS}, report_dir=args.report_dir
    )
    return 0 if run(opts).passed else 1


if __name__ == "__main__":
    sys.exit(main())
