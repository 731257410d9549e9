"""The pieces of ``loadtest/scenarios/locustfile.py``: options, the run's target, answer checks, the
per-process tally and the User classes. Nothing here imports uvloop or asyncpg: Locust patches
the standard library with gevent, so these modules run only inside a Locust process."""
