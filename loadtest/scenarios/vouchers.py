"""The voucher burst: the order service reserving one flash voucher for many orders at once.

Every iteration is a fresh customer and orderId. Some reservations are resent (the same call
again: the first answer again, never a second use), some customers try a second order (never a
second use: ALREADY_USED or OUT_OF_STOCK), then the use is confirmed, released or left to
expire."""

from __future__ import annotations

import random
from functools import partial

from locust import between, task
from locust.exception import StopUser

from loadtest.scenarios import answers
from loadtest.scenarios.answers import Answer
from loadtest.scenarios.base import GatewayUser, Judge, log

ORDER_AMOUNT = 500_000
RESEND_SHARE = 0.2
SECOND_ORDER_SHARE = 0.2
RELEASE_SHARE = 0.1


class VoucherBurst(GatewayUser):
    weight = 10
    wait_time = between(0.0, 0.5)

    def on_start(self) -> None:
        super().on_start()
        code = self.process.run.voucher
        if not code:
            log.error("no voucher in this run: VoucherBurst stops")
            raise StopUser()
        self.base_path = f"/vouchers/{code}/reservations"
        service = {"Authorization": f"Bearer {self.cfg.service_token}"}
        self.as_service = partial(self.call, headers=service)  # every call is the order service's

    @task
    def reserve_once(self) -> None:
        customer = self.process.new_user_id()
        order_id = f"lt-{customer}"
        first = self.reserve(customer, order_id, judge=_names(order_id))
        if random.random() < RESEND_SHARE:
            self.reserve(customer, order_id, judge=_same_use(first, order_id))
        if random.random() < SECOND_ORDER_SHARE:
            self.reserve(customer, f"{order_id}-2", judge=_no_second_use(first))
        if first.status != 201:
            return
        draw = random.random()
        if draw < self.opts.pay_share:
            self.settle(order_id, "confirm")
        elif draw < self.opts.pay_share + RELEASE_SHARE:
            self.settle(order_id, "release")

    def reserve(self, customer: int, order_id: str, judge: Judge) -> Answer:
        body = {"customerId": customer, "orderId": order_id, "orderAmount": ORDER_AMOUNT}
        return self.as_service(
            "POST", self.base_path, "voucher", answers.VOUCHER_RESERVE, body=body, judge=judge
        )

    def settle(self, order_id: str, action: str) -> Answer:
        """Confirm or release, again while the writer has not stored the use yet."""
        if action == "confirm":
            method, path, expected = "POST", f"/{order_id}/confirm", answers.VOUCHER_CONFIRM
        else:
            method, path, expected = "DELETE", f"/{order_id}", answers.VOUCHER_RELEASE
        endpoint, url = f"voucher-{action}", self.base_path + path
        call = partial(self.as_service, method, url, endpoint, expected)
        return self.until_stored(call, "RESERVATION_PROCESSING")


def _names(order_id: str) -> Judge:
    def judge(answer: Answer) -> str | None:
        if answer.status != 201:
            return None
        if answer.order_id != order_id:
            return "201 naming another orderId"
        discount = answer.body.get("discountAmount")
        if not isinstance(discount, int) or discount <= 0:
            return "201 without a discountAmount"
        return None

    return judge


def _same_use(first: Answer, order_id: str) -> Judge:
    names = _names(order_id)

    def judge(answer: Answer) -> str | None:
        if first.status == 201 and answer.status not in (201, 503, 0):
            got = f"{answer.status} {answer.code}"
            return f"a resent reservation answered {got} after a 201 (a replay repeats the 201)"
        return names(answer)

    return judge


def _no_second_use(first: Answer) -> Judge:
    def judge(answer: Answer) -> str | None:
        if first.status == 201 and answer.status == 201:
            return "a second use for one customer (perCustomerLimit 1)"
        return None

    return judge
