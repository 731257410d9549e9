"""The load tests' fixed values, in one place: where their files are, the loopback ports their
servers take, and the settings every loopback crowd needs. Tokens, secrets and the stack's
addresses come from ``Settings``, never from here."""

from __future__ import annotations

from pathlib import Path

LOADTEST_DIR = Path(__file__).resolve().parent
REPORTS_DIR = LOADTEST_DIR / "reports"  # git-ignored: raw results, logs, spike reports
BASELINES_DIR = LOADTEST_DIR / "baselines"
WRK_SCRIPTS_DIR = LOADTEST_DIR / "generators" / "wrk"
LOCUSTFILE = LOADTEST_DIR / "scenarios" / "locustfile.py"
LOCUST_PROBE = LOADTEST_DIR / "scenarios" / "locust_probe.py"

# Each tool has a port range of its own, so a benchmark and a spike can run side by side.
BENCH_PORTS = range(18200, 18300)  # loadtest.bench: servers under test
VOUCHER_BENCH_PORT = 18390  # loadtest.bench.voucher_load's gateway
SPIKE_PORTS = range(18400, 18500)  # loadtest.scenarios.spike: its gateway
NGINX_LISTEN = "127.0.0.1:18203"  # baselines/nginx.conf's own address, rewritten to a free port
