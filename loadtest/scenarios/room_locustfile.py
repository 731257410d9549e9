"""Locust scenarios for a sale with a waiting room (loadtest/scenarios/room.py):

    locust -f loadtest/scenarios/room_locustfile.py --host http://127.0.0.1:8088 --headless \\
        -u 2000 -r 2000 --waiting-room --opens-in 20 --buyers 5000 --run-time 2m

RoomShopper (joins, polls honouring Retry-After, buys when admitted) and RoomBotMix (hammers
without honouring it, and without an admission). With ``--item-id``, also give ``--sale-id``.
"""

from __future__ import annotations

from locust import events

from loadtest.scenarios import hooks
from loadtest.scenarios.room import RoomBotMix, RoomShopper

__all__ = ["RoomBotMix", "RoomShopper"]

hooks.install(events)
