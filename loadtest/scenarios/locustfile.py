"""Locust scenarios for the flash-sale gateway.

    locust -f loadtest/scenarios/locustfile.py --host http://127.0.0.1:8088  # web UI on :8089
    locust -f loadtest/scenarios/locustfile.py --host ... --class-picker  # choose scenarios
    locust -f loadtest/scenarios/locustfile.py --host ... FlashSaleSpike --headless -u 500 -r 500 \\
        --buyers 20000 --run-time 2m
    locust -f loadtest/scenarios/locustfile.py --host ... --master  # distributed:
    locust -f loadtest/scenarios/locustfile.py --worker --master-host HOST  # one per core

User classes: FlashSaleSpike (the crowd at the opening second), SteadyShopper, RetryStorm
(double clicks, resends on timeout), BotMix (far over the per-user limit), VoucherBurst.
Without ``--item-id``/``--voucher`` (``FLASHSALE_LOAD_ITEM_ID``/``FLASHSALE_LOAD_VOUCHER``) the
master creates and arms a fresh sale (``--units``, ``--shards``, opening ``--opens-in`` seconds
later) and a flash voucher at test start, through the admin API of ``--host``. Answers are
counted per kind (``purchase 202 PENDING``, ``purchase 410 SOLD_OUT``...); see
``loadtest/scenarios/answers.py`` for what counts as a failure.

Locust patches the standard library with gevent: nothing here imports uvloop or asyncpg.
"""

from __future__ import annotations

from locust import events

from loadtest.scenarios import hooks
from loadtest.scenarios.shoppers import BotMix, FlashSaleSpike, RetryStorm, SteadyShopper
from loadtest.scenarios.vouchers import VoucherBurst

__all__ = ["BotMix", "FlashSaleSpike", "RetryStorm", "SteadyShopper", "VoucherBurst"]

hooks.install(events)
