"""The test suite's own fixed values, in one place: the loopback ports its gateways listen on and
the settings its gateways run with. Tokens, secrets and the stack's addresses come from
``Settings`` (the ``cfg`` and ``live_stack`` fixtures), never from literals."""

from __future__ import annotations

from tests.support.workers import worker_port

# Each module that starts gateways has ports of its own, so modules never meet on one; each
# xdist worker moves them into a block of its own (worker_port).
PURCHASE_HTTP_PORT = worker_port(18089)  # tests/gateway/test_purchase_http.py
PIPELINE_PORT = worker_port(18095)  # tests/system/test_order_pipeline.py (+1: its doomed gateway)
VOUCHER_PORT = worker_port(18301)  # tests/system/test_vouchers.py
SHORT_HOLD_PORT = worker_port(18302)  # tests/system/test_vouchers.py: 3 s holds, doomed gateway
DASHBOARD_PORT = worker_port(18401)  # tests/deploy/test_dashboard.py
WATCH_PORT = worker_port(18402)  # tests/flashsale/test_watch.py
REPORT_PORT = worker_port(18403)  # tests/flashsale/test_report.py

# Tests share 2 cores with Redis, Kafka, PostgreSQL and the writer: a 250 ms Redis deadline
# would turn scheduling hiccups into 503s. The deadline itself is tested with a paused node.
REDIS_TIMEOUT_MS = 1000
# A test gateway's drain on SIGTERM: nothing balances onto it, so a short one (the default's
# 2 s per stop added a minute to the suite); the shutdown tests set their own.
DRAIN_MS = 200
# An outbox relay quick enough that a test sees a lost Kafka send re-sent within seconds.
QUICK_RELAY = {"outbox_relay_min_age_ms": 2000, "outbox_relay_interval_ms": 500}
