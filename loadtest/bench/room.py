"""``python -m loadtest.bench.room``: the waiting room's joins/s and polls/s of one gateway
process, side by side with the sold-out path in the same run (issue 16).

One gateway pinned to core 0 (``--server-core``), wrk pinned to core 1 (``--client-core``),
closed loop, ``--connections`` connections, rounds of ``--seconds`` alternating the three
paths ``--repeats`` times:

- sold out: ``POST /items/{id}/purchase`` of a sold-out item (the front's flag, no I/O);
- poll: ``GET /sales/{id}/queue`` with one placed, waiting ticket (HMAC check, local
  frontier, no Redis);
- join: ``POST /sales/{id}/queue``, a new buyer every request (one Lua call on the room's
  slot).

The per-buyer and per-address buckets are lifted: this measures the path, not the limits.
Prints a Markdown table: medians over the repeats of requests/s and of the gateway's own CPU
time per request (read from /proc around each round: the robust figure on a shared machine),
each ÷ the sold-out path's."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings, settings
from loadtest.bench import servers
from loadtest.constants import BENCH_PORTS
from loadtest.generators import tokens, wrk
from loadtest.measure import cpu as cpu_use
from rig.admin import NewItem, new_sale
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS

_LIFTED = {
    **LIFTED_IP_LIMITS,
    "waiting_room_buyer_rate_per_s": 1e9,
    "waiting_room_buyer_burst": 1e9,
}


def _setup(base: str, cfg: Settings) -> tuple[str, str, dict[str, str], str]:
    """(sold-out purchase URL, queue URL, a waiting ticket's header, join URL)."""
    now = time.time()
    plain = new_sale(base, cfg, [NewItem("bench-sold-out", 1, 1)], opens_at=now - 5)
    item = plain["items"][0]["itemId"]
    for buyer in (1, 2):  # the one unit, then SOLD_OUT raises the flag
        httpx.post(
            f"{base}/api/flash-sales/items/{item}/purchase",
            headers={"Authorization": f"Bearer {sign_token(cfg, buyer)}"},
            timeout=10,
        )
    admin = {"Authorization": f"Bearer {cfg.admin_token}"}
    body = {
        "name": "bench-room",
        "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 5)),
        "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 3600)),
        "items": [{"productId": "bench-room", "quantity": 1000, "price": 1, "shards": 4}],
        "waitingRoom": {"admissionRatePerSecond": 1},  # the frontier barely moves
    }
    sale = httpx.post(f"{base}/admin/sales", json=body, headers=admin, timeout=10).json()
    sale_id = sale["saleId"]
    httpx.post(f"{base}/admin/sales/{sale_id}/arm", headers=admin, timeout=30).raise_for_status()
    queue = f"{base}/api/flash-sales/sales/{sale_id}/queue"
    ticket = ""
    for buyer in range(10, 1010):  # the last of 1,000 places waits the whole run
        auth = {"Authorization": f"Bearer {sign_token(cfg, buyer)}"}
        for _ in range(20):  # a 503 on this shared box: again after its Retry-After
            joined = httpx.post(queue, headers=auth, timeout=10)
            if joined.status_code != 503:
                break
            time.sleep(float(joined.headers.get("retry-after", "1")))
        if joined.status_code != 200:
            raise RuntimeError(f"join answered {joined.status_code}: {joined.text}")
        ticket = joined.json()["ticket"]
    polled = httpx.get(queue, headers={"X-Queue-Ticket": ticket}, timeout=10).json()
    if polled.get("state") != "WAITING":
        raise RuntimeError(f"the bench ticket is not waiting: {polled}")
    return f"{base}/api/flash-sales/items/{item}/purchase", queue, {"X-Queue-Ticket": ticket}, queue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--client-core", default="1")
    opts = parser.parse_args()
    cfg = settings()
    port = free_port(set(), BENCH_PORTS)
    base = f"http://127.0.0.1:{port}"
    env = settings_env(gateway_port=port, **_LIFTED)
    rates: dict[str, list[float]] = {"sold out": [], "poll": [], "join": []}
    p99: dict[str, list[float]] = {k: [] for k in rates}
    cpu: dict[str, list[float]] = {k: [] for k in rates}
    with tempfile.TemporaryDirectory() as work:
        log_dir = Path(work)
        ready = servers.http_ready(f"{base}/readyz", 200)
        argv = servers.gateway_argv(port)
        with servers.running("room-gateway", argv, ready, log_dir, opts.server_core, env) as gw:
            sold_out, poll_url, ticket, join_url = _setup(base, cfg)
            buyers = tokens.BuyerIds()
            for _ in range(opts.repeats):
                token_file = tokens.write(cfg, log_dir / "join.tokens", buyers.take(200_000))
                loads: dict[str, Callable[[], wrk.WrkResult]] = {
                    "sold out": lambda: wrk.run(
                        sold_out, opts.seconds, opts.connections, opts.client_core
                    ),
                    "poll": lambda: wrk.run(
                        poll_url,
                        opts.seconds,
                        opts.connections,
                        opts.client_core,
                        get_headers=ticket,
                    ),
                    "join": lambda: wrk.run(
                        join_url,
                        opts.seconds,
                        opts.connections,
                        opts.client_core,
                        tokens=(token_file, 0, 200_000),  # noqa: B023 - called in this pass
                    ),
                }
                for name, load in loads.items():
                    # The gateway's own CPU per request: what a path costs, whatever else
                    # runs on this shared machine (its throughput varies with that).
                    with cpu_use.used(gw.pid) as use:
                        result = load()
                    cpu_us = use.of(gw.pid) / result.requests * 1e6
                    rates[name].append(result.rps)
                    p99[name].append(result.p99_ms)
                    cpu[name].append(cpu_us)
                    print(
                        f"{name:9} {result.rps:9.0f}/s {cpu_us:7.1f} µs CPU/request "
                        f"p99 {result.p99_ms:7.2f} ms non-2xx {result.non_2xx} "
                        f"errors {result.socket_errors}",
                        flush=True,
                    )
    base_rate, base_cpu = statistics.median(rates["sold out"]), statistics.median(cpu["sold out"])
    print("\n| path | requests/s | ÷ sold out | gateway CPU µs/request | ÷ sold out | p99 ms |")
    print("|---|---|---|---|---|---|")
    for name in rates:
        rate, tail = statistics.median(rates[name]), statistics.median(p99[name])
        used = statistics.median(cpu[name])
        print(
            f"| {name} | {rate:,.0f} | {rate / base_rate:.2f} | {used:.0f} | "
            f"{used / base_cpu:.2f} | {tail:.1f} |"
        )


if __name__ == "__main__":
    main()
