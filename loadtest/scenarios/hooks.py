"""Locust event listeners: the options, the run's target at test start (made on the master or
the standalone process, forwarded to the workers), the 202s' orderIds from the workers, a
progress line, the end of the run once every user has finished, the summary and outcome file.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import gevent  # type: ignore[import-untyped]
import httpx
from locust.runners import STATE_RUNNING, MasterRunner, WorkerRunner

from kernel.settings import settings
from loadtest.scenarios import options, run, tally
from loadtest.scenarios.options import Options
from loadtest.scenarios.shoppers import RetryStorm
from rig.admin import AdminError

log = logging.getLogger(__name__)

PURCHASE_CLASSES = frozenset(
    {"FlashSaleSpike", "SteadyShopper", "RetryStorm", "BotMix", "RoomShopper", "RoomBotMix"}
)
VOUCHER_CLASSES = frozenset({"VoucherBurst"})
SUMMARY_DELAY_S = 4.0  # a master waits for the workers' last stats reports (every 3 s)


class _Greenlets:
    def __init__(self) -> None:
        self.watchers: list[Any] = []
        self.summary: Any = None
        self.summarised = False

    def kill_watchers(self) -> None:
        current = gevent.getcurrent()
        for greenlet in self.watchers:
            if greenlet is not current:
                greenlet.kill(block=False)
        self.watchers = []


_state = _Greenlets()


def install(events: Any) -> None:
    events.init_command_line_parser.add_listener(options.add_arguments)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)


def _on_init(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        environment.events.report_to_master.add_listener(tally.ACCEPTED.on_report_to_master)
    elif isinstance(runner, MasterRunner):
        environment.events.worker_report.add_listener(tally.ACCEPTED.on_worker_report)


def _on_test_start(environment: Any, **_: Any) -> None:
    runner = environment.runner
    opts = Options.of(environment.parsed_options)
    cfg = settings()
    RetryStorm.network_timeout = opts.retry_timeout
    tally.ACCEPTED.clear()
    if not isinstance(runner, WorkerRunner):
        _decide_target(environment, opts)
        _state.summarised = False
        started = time.monotonic()
        _state.watchers = [gevent.spawn(_end_when_users_finish, environment)]
        if opts.progress:
            _state.watchers.append(gevent.spawn(_print_progress, environment, started))
    worker_index = runner.worker_index if isinstance(runner, WorkerRunner) else 0
    run.begin(environment.parsed_options, worker_index, cfg)


def _decide_target(environment: Any, opts: Options) -> None:
    """Once per run, where the users are spawned from: the item and voucher (given or made)."""
    names = {c.__name__ for c in environment.user_classes}
    runner = environment.runner
    workers = runner.worker_count if isinstance(runner, MasterRunner) else 1
    target: dict[str, Any] | None
    try:
        target = run.resolve(
            environment.host,
            settings(),
            opts,
            wants_item=bool(names & PURCHASE_CLASSES),
            wants_voucher=bool(names & VOUCHER_CLASSES),
            workers=workers,
        ).as_dict()
    except (AdminError, httpx.HTTPError) as exc:
        log.error("could not set up the run's sale or voucher: %s", exc)
        environment.process_exit_code = 1
        target = None
    setattr(environment.parsed_options, run.RUN_KEY, target)


def _end_when_users_finish(environment: Any) -> None:
    """FlashSaleSpike users stop when the crowd is through: end the run then, not at --run-time.
    (The runner is RUNNING once every user is spawned; none left after that means all done.)"""
    runner = environment.runner
    while True:
        gevent.sleep(0.5)
        if runner.state == STATE_RUNNING and runner.user_count == 0:
            log.info("every user has finished: ending the run")
            if environment.parsed_options.headless:
                runner.quit()
            else:
                runner.stop()
            return


def _print_progress(environment: Any, started: float) -> None:
    runner = environment.runner
    last_count, last_time = 0, time.monotonic()
    while True:
        gevent.sleep(1.0)
        now, count = time.monotonic(), runner.stats.total.num_requests
        rate = (count - last_count) / (now - last_time)
        last_count, last_time = count, now
        print(tally.progress(runner.stats, runner.user_count, now - started, rate), flush=True)


def _on_test_stop(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        return
    _state.kill_watchers()
    if isinstance(runner, MasterRunner):
        _state.summary = gevent.spawn_later(SUMMARY_DELAY_S, _summarise, environment)
    else:
        _summarise(environment)


def _on_quitting(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    _state.kill_watchers()
    if _state.summary is not None and not _state.summary.dead:
        _state.summary.kill(block=False)
        _state.summarised = False
    if not _state.summarised:
        _summarise(environment)


def _summarise(environment: Any) -> None:
    _state.summarised = True
    stats = environment.runner.stats
    print(tally.summary(stats), flush=True)
    opts = Options.of(environment.parsed_options)
    if opts.outcome_file:
        target = getattr(environment.parsed_options, run.RUN_KEY, None)
        tally.write_outcome(Path(opts.outcome_file), stats, target)
