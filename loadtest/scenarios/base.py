"""The common base of the scenarios: one checked HTTP call, recorded under the answer's kind."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import gevent  # type: ignore[import-untyped]
from geventhttpclient.response import HTTPConnectionClosed
from locust import FastHttpUser
from locust.exception import StopUser

from flashsale import http_retry
from kernel.settings import Settings, settings
from loadtest.scenarios import answers, run
from loadtest.scenarios.answers import Answer, Expected
from loadtest.scenarios.options import Options
from loadtest.scenarios.tally import ACCEPTED

log = logging.getLogger(__name__)
MAX_RETRY_AFTER_S = 2.0
PROCESSING_TRIES = 5

# Looks at an answer inside its ``with`` block (so it can still fail it): a reason, or None.
Judge = Callable[[Answer], str | None]
T = TypeVar("T")


class GatewayUser(FastHttpUser):
    abstract = True
    network_timeout = 10.0
    connection_timeout = 5.0
    process: run.Process
    opts: Options
    cfg: Settings

    def on_start(self) -> None:
        self.process = self.required(run.current(), "no target for this run (see the master's log)")
        self.opts = Options.of(self.environment.parsed_options)
        self.cfg = settings()

    def required(self, value: T | None, missing: str) -> T:
        """``value``, which this user's scenario cannot go without; when it is None, 0 or empty,
        the user logs ``missing`` and stops."""
        if not value:
            log.error("%s: %s stops", missing, type(self).__name__)
            raise StopUser()
        return value

    def call(
        self,
        method: str,
        path: str,
        endpoint: str,
        expected: Expected,
        *,
        headers: dict[str, str],
        body: dict[str, Any] | None = None,
        judge: Judge | None = None,
        no_answer_ok: bool = False,
    ) -> Answer:
        """One request, checked against ``expected`` (and ``judge``, which always sees it).
        Every request of the scenarios is idempotent (a purchase per item and buyer), so one
        whose connection was lost before an answer (a server closing an idle kept-alive
        connection as it was reused) is sent again, under flashsale/http_retry.py's policy;
        each lost one is recorded as ``<endpoint> resent``."""
        args = (method, path, endpoint, expected, headers, body, judge, no_answer_ok)
        try:
            for attempt in http_retry.attempts(on=(http_retry.ConnectionLost,)):
                with attempt:
                    return self._call_once(*args, resend=True)
        except http_retry.ConnectionLost:
            pass
        return self._call_once(*args, resend=False)  # the last one, judged as any answer

    def _call_once(
        self,
        method: str,
        path: str,
        endpoint: str,
        expected: Expected,
        headers: dict[str, str],
        body: dict[str, Any] | None,
        judge: Judge | None,
        no_answer_ok: bool,
        *,
        resend: bool,
    ) -> Answer:
        with self.client.request(
            method, path, name=endpoint, headers=headers, json=body, catch_response=True
        ) as reply:
            if resend and _connection_lost(getattr(reply, "error", None)):
                reply.request_meta["name"] = f"{endpoint} resent"
                reply.success()
                raise http_retry.ConnectionLost(endpoint)
            answer = answers.read(reply)
            reply.request_meta["name"] = answer.stat_name(endpoint)
            if endpoint == "purchase" and answer.status == 202 and answer.order_id:
                ACCEPTED.add(answer.order_id)
            problem = None if no_answer_ok and answer.status == 0 else answer.problem(expected)
            verdict = judge(answer) if judge is not None else None
            problem = problem or verdict
            if problem:
                reply.failure(problem)
            else:
                reply.success()
        return answer

    def pause(self, seconds: float) -> None:
        gevent.sleep(seconds)

    def retry_pause(self, answer: Answer) -> None:
        """Wait as the answer's Retry-After asks (at most a couple of seconds)."""
        self.pause(min(float(answer.retry_after or 1), MAX_RETRY_AFTER_S))

    def until_stored(self, call: Callable[[], Answer], processing: str) -> Answer:
        """``call()``, again after the answer's Retry-After while it is ``processing`` (the writer
        has not stored the order or use yet) or a 503, at most ``PROCESSING_TRIES`` times."""
        for _ in range(PROCESSING_TRIES):
            answer = call()
            if answer.code != processing and answer.status != 503:
                break
            self.retry_pause(answer)
        return answer


def _connection_lost(error: object) -> bool:
    """Did the connection break under the request, before any answer (not a timeout)?"""
    if isinstance(error, HTTPConnectionClosed | ConnectionError):
        return True
    return isinstance(error, OSError) and error.errno in http_retry.LOST_ERRNOS
