"""A locustfile that does nothing but POST as fast as one Locust process can: how many requests/s
one Locust worker generates on one core (``loadtest.bench.loadgen`` runs it headless against nginx
``return 410``). Not a scenario: the scenarios are in ``locustfile.py``.

    locust -f loadtest/scenarios/locust_probe.py --headless -u 64 -r 64 -t 10s --host http://127.0.0.1:PORT
"""

from __future__ import annotations

from locust import FastHttpUser, constant, task


class Prober(FastHttpUser):
    wait_time = constant(0)

    @task
    def purchase(self) -> None:
        with self.client.post("/", catch_response=True) as response:
            if response.status_code == 410:
                response.success()
            else:
                response.failure(f"answered {response.status_code}")
