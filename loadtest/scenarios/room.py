"""The waiting-room scenarios (docs/waiting-room.md), in a locustfile of their own so the main
one's mix stays as it was:

    locust -f loadtest/scenarios/room_locustfile.py --host http://127.0.0.1:8088 --headless \\
        -u 2000 -r 2000 --waiting-room --opens-in 20 --buyers 5000 --run-time 2m

RoomShopper: a person — join (solving the sale's proof of work when asked), poll honouring
Retry-After, buy once admitted; a purchase without an admission never happens. RoomBotMix: one
identity hammering the poll and the purchase at ``--bot-rate`` without honouring anything and
without an admission: it must get 429s and 403 ADMISSION_REQUIRED, never a 202.
"""

from __future__ import annotations

from locust import constant, task

from gateway.waiting_room import proof
from loadtest.scenarios import answers
from loadtest.scenarios.answers import Answer
from loadtest.scenarios.run import Buyer
from loadtest.scenarios.shoppers import Bot, Shopper

MAX_POLLS = 600  # a buyer gives up after this many polls (Retry-After is 1-30 s)


class _RoomUser(Shopper):
    abstract = True

    def on_start(self) -> None:
        super().on_start()
        sale_id = self.required(self.process.run.sale_id, "no sale id in this run (--sale-id)")
        self.queue_path = f"/api/flash-sales/sales/{sale_id}/queue"

    def join(self, buyer: Buyer) -> Answer:
        answer = self.call(
            "POST", self.queue_path, "queue join", answers.QUEUE_JOIN, headers=buyer.auth
        )
        if answer.code == "PROOF_OF_WORK_REQUIRED":
            nonce = proof.solve(self.process.run.sale_id, buyer.user_id, answer.body["difficulty"])
            headers = {**buyer.auth, proof.HEADER: nonce}
            answer = self.call(
                "POST", self.queue_path, "queue join", answers.QUEUE_JOIN, headers=headers
            )
        return answer

    def poll_queue(self, buyer: Buyer, ticket: str) -> Answer:
        """The buyer's own ticket, with its token: the gateway refuses anyone else's."""
        return self.call(
            "GET",
            self.queue_path,
            "queue poll",
            answers.QUEUE_POLL,
            headers={**buyer.auth, "X-Queue-Ticket": ticket},
        )

    def buy(self, buyer: Buyer, admission: str | None) -> Answer:
        headers = dict(buyer.auth)
        if admission is not None:
            headers["X-Admission"] = admission
        return self.call(
            "POST", self.purchase_path, "purchase", answers.ROOM_PURCHASE, headers=headers
        )


class RoomShopper(_RoomUser):
    """The crowd through the room: each buyer once, as a client must behave."""

    weight = 100
    wait_time = constant(0)

    @task
    def queue_and_buy(self) -> None:
        buyer = self.crowd_buyer()
        joined = self.join(buyer)
        if joined.status != 200:
            return
        ticket = joined.body["ticket"]
        for _ in range(MAX_POLLS):
            answer = self.poll_queue(buyer, ticket)
            if answer.status == 410:
                return  # sold out: every waiter hears it
            if answer.status == 200:
                ticket = answer.body["ticket"]
                if answer.body["state"] == "ADMITTED":
                    bought = self.buy(buyer, answer.body["admission"])
                    if bought.status == 202 and bought.order_id:
                        self.pay_or_abandon(buyer, bought.order_id)
                    return
            self.pause(float(answer.retry_after or 1))  # as the gateway asks


# Bot first: its on_start makes the bot after the room's checks, as the room's users need them.
class RoomBotMix(Bot, _RoomUser):
    """A bot that never waits its turn: it must never buy."""

    def on_start(self) -> None:
        super().on_start()
        joined = self.join(self.bot)
        self.ticket = joined.body.get("ticket", "") if joined.status == 200 else ""

    @task
    def hammer(self) -> None:
        if self.ticket:
            self.poll_queue(self.bot, self.ticket)  # at its own pace, not Retry-After's: 429s
        self.call(
            "POST",
            self.purchase_path,
            "purchase",
            answers.ROOM_PURCHASE,
            headers=self.bot.auth,
            judge=_never_bought,
        )


def _never_bought(answer: Answer) -> str | None:
    return "a purchase without an admission got 202" if answer.status == 202 else None
