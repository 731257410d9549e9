"""The buyers' scenarios: the spike's crowd, steady shoppers, impatient clients, bots.

Each Locust user plays one buyer after another (a fresh id and token per buyer), except the
bots, which keep one identity and hammer. All of them wait for the sale to open.
"""

from __future__ import annotations

import random
from functools import partial

import gevent  # type: ignore[import-untyped]
from gevent.event import Event  # type: ignore[import-untyped]
from locust import between, constant, constant_throughput, task
from locust.exception import StopUser

from loadtest.scenarios import answers
from loadtest.scenarios.answers import Answer
from loadtest.scenarios.base import GatewayUser, Judge
from loadtest.scenarios.run import Buyer

OPENING_RETRY_S = 0.25
OPENING_TRIES = 40  # 10 s of SALE_NOT_OPEN (a client clock ahead of the server's) at most


class Shopper(GatewayUser):
    """Purchase, poll, pay or cancel, each answer checked."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        item_id = self.required(self.process.run.item_id, "no item to buy in this run")
        self.purchase_path = f"/api/flash-sales/items/{item_id}/purchase"

    def purchase_once(
        self, buyer: Buyer, judge: Judge | None = None, no_answer_ok: bool = False
    ) -> Answer:
        return self.call(
            "POST",
            self.purchase_path,
            "purchase",
            answers.PURCHASE,
            headers=buyer.auth,
            judge=judge,
            no_answer_ok=no_answer_ok,
        )

    def purchase(self, buyer: Buyer) -> Answer:
        """Buy as a patient person does: again while the sale is not open yet, and again after a
        503's Retry-After (``--retries`` times); a retry never buys twice."""
        answer = self.purchase_once(buyer)
        opening, resends = 0, 0
        while True:
            if answer.status == 403 and opening < OPENING_TRIES:
                opening += 1
                self.pause(OPENING_RETRY_S)
            elif answer.status == 503 and resends < self.opts.retries:
                resends += 1
                self.retry_pause(answer)
            else:
                return answer
            answer = self.purchase_once(buyer)

    def poll(self, buyer: Buyer, order_id: str) -> str:
        """GET the order until it leaves PENDING, at most ``--polls`` times; its last status."""
        status = "PENDING"
        for n in range(self.opts.polls):
            if n:
                self.pause(self.opts.poll_interval)
            answer = self.order(buyer, order_id)
            status = answer.code or status
            if status != "PENDING":
                break
        return status

    def order(self, buyer: Buyer, order_id: str, judge: Judge | None = None) -> Answer:
        return self.call(
            "GET",
            f"/api/flash-sales/orders/{order_id}",
            "order",
            answers.ORDER,
            headers=buyer.auth,
            judge=judge,
        )

    def settle(self, buyer: Buyer, order_id: str, action: str) -> Answer:
        """Pay or cancel, again while the writer has not stored the order (ORDER_PROCESSING)."""
        expected = answers.PAY if action == "pay" else answers.CANCEL
        path = f"/api/flash-sales/orders/{order_id}/{action}"
        call = partial(self.call, "POST", path, action, expected, headers=buyer.auth)
        return self.until_stored(call, "ORDER_PROCESSING")

    def pay_or_abandon(self, buyer: Buyer, order_id: str, cancel_share: float = 0.0) -> None:
        draw = random.random()
        if draw < self.opts.pay_share:
            paid = self.settle(buyer, order_id, "pay")
            if paid.code == "PAID":
                self.order(buyer, order_id, judge=_shows("PAID"))
        elif draw < self.opts.pay_share + cancel_share:
            cancelled = self.settle(buyer, order_id, "cancel")
            if cancelled.code == "CANCELLED":
                self.order(buyer, order_id, judge=_shows("CANCELLED"))
        # else: abandoned; the order expires after the sale's payment window

    def wait_for_opening(self) -> None:
        self.process.wait_for_opening()

    def crowd_buyer(self) -> Buyer:
        """The next buyer of the crowd; once this worker's slice of ``--buyers`` is through, the
        user stops: that is how the crowd's scenarios end."""
        buyer = self.process.crowd_buyer()
        if buyer is None:
            raise StopUser()
        return buyer


class FlashSaleSpike(Shopper):
    """The crowd released at the opening second: every buyer distinct, buying once, polling its
    order, some paying, the rest abandoning. Ends when this worker's slice of ``--buyers`` is
    through (run it with ``-r`` equal to ``-u`` so the users arrive at once)."""

    weight = 100
    wait_time = constant(0)

    @task
    def buy_once(self) -> None:
        buyer = self.crowd_buyer()
        self.wait_for_opening()
        answer = self.purchase(buyer)
        if answer.status == 202 and answer.order_id:
            self.poll(buyer, answer.order_id)
            self.pay_or_abandon(buyer, answer.order_id)


class SteadyShopper(Shopper):
    """A steady load at a person's pace: buy, poll, then pay, cancel (1 in 10) or abandon."""

    weight = 10
    wait_time = between(1.0, 5.0)

    @task
    def shop(self) -> None:
        buyer = self.process.new_buyer()
        self.wait_for_opening()
        answer = self.purchase(buyer)
        if answer.status == 202 and answer.order_id:
            self.pause(random.uniform(0.5, 2.0))
            self.poll(buyer, answer.order_id)
            self.pay_or_abandon(buyer, answer.order_id, cancel_share=0.1)


class RetryStorm(Shopper):
    """Impatient clients: a double click (two concurrent purchases by one buyer), then a resend
    of every click that timed out (``--retry-timeout``), then one more click later. One buyer
    never gets two 202s, and a 409 ALREADY_PURCHASED names the orderId the 202 gave."""

    weight = 10
    wait_time = between(0.5, 2.0)

    @task
    def storm(self) -> None:
        buyer = self.process.new_buyer()
        self.wait_for_opening()
        got = self.double_click(buyer)
        once = _OneOrder(got)
        for _ in range(self.opts.retries):
            if any(a.status not in (0, 503) for a in got):
                break  # one click was answered for good: nothing to resend
            if got and got[-1].status == 503:
                self.retry_pause(got[-1])
            got.append(self.purchase_once(buyer, judge=once.judge, no_answer_ok=True))
        self.pause(random.uniform(0.2, 1.0))
        again = self.purchase_once(buyer, judge=once.judge, no_answer_ok=True)
        if once.order_id is not None and again.status not in (0, 503):
            self.order(buyer, once.order_id)

    def double_click(self, buyer: Buyer) -> list[Answer]:
        got: list[Answer | None] = [None, None]
        done = [Event(), Event()]

        def click(i: int) -> None:
            def judge(answer: Answer) -> str | None:
                got[i] = answer
                done[i].set()
                done[1 - i].wait(timeout=self.network_timeout + 5)  # see both before judging
                return _pair_problem(answer, got[1 - i])

            self.purchase_once(buyer, judge=judge, no_answer_ok=True)

        gevent.joinall([gevent.spawn(click, 0), gevent.spawn(click, 1)])
        return [a for a in got if a is not None]


class Bot(Shopper):
    """One identity (``self.bot``) at ``--bot-rate`` requests a second, whatever it is answered:
    the bots of this mix and of the waiting room's (loadtest/scenarios/room.py), a small share
    (weight 1 against the crowd's 100)."""

    abstract = True
    weight = 1

    def wait_time(self) -> float:
        pace: float = constant_throughput(self.opts.bot_rate)(self)
        return pace

    def on_start(self) -> None:
        super().on_start()
        self.bot = self.process.new_buyer()


class BotMix(Bot):
    """A few bots far over the per-user limit (``--bot-rate``/s against 5/s): after the first
    answers (202, then 409s) they must get 429 with Retry-After, and never a second 202. Give
    it a small share: weight 1 against the spike's 100."""

    def on_start(self) -> None:
        super().on_start()
        self.once = _OneOrder([])

    @task
    def hammer(self) -> None:
        self.wait_for_opening()
        self.purchase_once(self.bot, judge=self.once.judge)


class _OneOrder:
    """One buyer's purchase answers so far: at most one 202, and 409s naming its orderId."""

    def __init__(self, seen: list[Answer]) -> None:
        self.order_id: str | None = None
        self.got_202 = False
        for answer in seen:
            self.judge(answer)

    def judge(self, answer: Answer) -> str | None:
        problem = None
        if answer.status == 202:
            if self.got_202:
                problem = "a second 202 for one buyer"
            elif self.order_id is not None and answer.order_id != self.order_id:
                problem = "a 202 with another orderId than ALREADY_PURCHASED named"
            self.got_202 = True
        elif answer.code == "ALREADY_PURCHASED":
            if self.order_id is not None and answer.order_id != self.order_id:
                problem = "ALREADY_PURCHASED names another orderId"
        if answer.status == 202 or answer.code == "ALREADY_PURCHASED":
            # a click that timed out may have bought it: the 409 then tells the orderId
            self.order_id = self.order_id or answer.order_id
        return problem


def _pair_problem(mine: Answer, other: Answer | None) -> str | None:
    if other is None:
        return None
    if mine.status == 202 and other.status == 202:
        return "double click: two 202s for one buyer"
    if mine.code == "ALREADY_PURCHASED" and other.status == 202:
        if mine.order_id != other.order_id:
            return "double click: the 409 names another orderId than the 202"
    return None


def _shows(status: str) -> Judge:
    def judge(answer: Answer) -> str | None:
        if answer.status == 200 and answer.code != status:
            return f"order shows {answer.code} after {status}"
        return None

    return judge
