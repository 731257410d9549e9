"""The ``room`` section: the waiting room's joins/s and polls/s of one gateway process, side by
side with the sold-out path in the same run.

One gateway pinned to the server core, wrk pinned to the load core, closed loop,
``--room-connections`` connections, rounds of ``--room-seconds`` alternating the three paths
``--repeats`` times:

- sold out: ``POST /items/{id}/purchase`` of a sold-out item (the front's flag, no I/O);
- poll: ``GET /sales/{id}/queue`` with one placed, waiting ticket and its buyer's token (the
  token and the ticket each verified once and remembered, local frontier, no Redis);
- join: ``POST /sales/{id}/queue``, a new buyer every request (one Lua call on the room's
  slot).

The per-buyer and per-address buckets are lifted: this measures the path, not the limits.
bench.md gets medians over the repeats of requests/s and of the gateway's own CPU time per
request (read from /proc around each round: the robust figure on a shared machine), each ÷ the
sold-out path's."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from loadtest.bench import results as store
from loadtest.bench import servers
from loadtest.bench.context import Context, option
from loadtest.bench.harness import Measured
from loadtest.bench.report import fmt
from loadtest.bench.results import Step
from loadtest.constants import BENCH_PORTS
from loadtest.generators import tokens, wrk
from loadtest.measure import cpu
from rig.admin import NewItem, new_sale
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS

_LIFTED = {
    **LIFTED_IP_LIMITS,
    "waiting_room_buyer_rate_per_s": 1e9,
    "waiting_room_buyer_burst": 1e9,
}


def _setup(base: str, cfg: Settings) -> tuple[str, str, dict[str, str], str]:
    """(sold-out purchase URL, queue URL, a waiting ticket's headers, join URL)."""
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
    auth: dict[str, str] = {}
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
    polling = {**auth, "X-Queue-Ticket": ticket}  # the last buyer's ticket, with its token
    polled = httpx.get(queue, headers=polling, timeout=10).json()
    if polled.get("state") != "WAITING":
        raise RuntimeError(f"the bench ticket is not waiting: {polled}")
    return f"{base}/api/flash-sales/items/{item}/purchase", queue, polling, queue


@dataclass(frozen=True)
class RoomOptions:
    seconds: float = option(5.0, "seconds per round")
    connections: int = option(64, "wrk connections")


PATHS = ("sold out", "poll", "join")


def measure(ctx: Context, opts: RoomOptions, rec: store.Recorder) -> dict[str, Any]:
    cfg, o = ctx.cfg, ctx.opts
    port = free_port(set(), BENCH_PORTS)
    base = f"http://127.0.0.1:{port}"
    env = settings_env(gateway_port=port, **_LIFTED)
    ready = servers.http_ready(f"{base}/readyz", 200)
    argv = servers.gateway_argv(port)
    with servers.running("room-gateway", argv, ready, ctx.log_dir, o.server_core, env) as gw:
        sold_out, poll_url, ticket, join_url = _setup(base, cfg)
        buyers = tokens.BuyerIds()

        def one(load: Callable[[], wrk.WrkResult]) -> Measured:
            # The gateway's own CPU per request: what a path costs, whatever else runs on this
            # shared machine (its throughput varies with that).
            with cpu.used(gw.pid) as use:
                result = load()
            problems = [f"{result.socket_errors} socket errors"] * bool(result.socket_errors)
            return {**result.as_dict(), **use.figures(result.requests)}, problems

        def steps(r: int) -> Iterator[Step]:
            token_file = tokens.write(cfg, ctx.workdir / "join.tokens", buyers.take(200_000))
            loads: dict[str, Callable[[], wrk.WrkResult]] = {
                "sold out": lambda: wrk.run(sold_out, opts.seconds, opts.connections, o.load_core),
                "poll": lambda: wrk.run(
                    poll_url, opts.seconds, opts.connections, o.load_core, get_headers=ticket
                ),
                "join": lambda: wrk.run(
                    join_url, opts.seconds, opts.connections, o.load_core,
                    tokens=(token_file, 0, 200_000),
                ),
            }  # fmt: skip
            for name in store.rotate(PATHS, r):
                yield f"{name} #{r + 1}", ("room", name, r), partial(one, loads[name])

        rec.repeats("room", ctx.args.repeats, steps, _brief)
    return {**dataclasses.asdict(opts), "repeats": ctx.args.repeats, "core": o.server_core}


def _brief(m: dict[str, Any]) -> str:
    return f"{m['rps']:,.0f}/s, {m['cpu_us_per_req']:.1f} µs CPU/request, p99 {m['p99_ms']:.2f} ms"


def render(data: store.Section) -> list[str]:
    runs = [r for r in data["runs"] if r["metrics"]]

    def med(name: str, key: str) -> float:
        return statistics.median(r["metrics"][key] for r in runs if r["subject"] == name) or 0.0

    base_rate, base_cpu = med("sold out", "rps"), med("sold out", "cpu_us_per_req")
    rows = [
        [
            name, fmt.rate(med(name, "rps")), f"{med(name, 'rps') / base_rate:.2f}",
            f"{med(name, 'cpu_us_per_req'):.0f}", f"{med(name, 'cpu_us_per_req') / base_cpu:.2f}",
            f"{med(name, 'p99_ms'):.1f}",
        ]
        for name in PATHS
        if any(r["subject"] == name for r in runs)
    ]  # fmt: skip
    head = ["path", "requests/s", "÷ sold out", "gateway CPU µs/request", "÷ sold out", "p99 ms"]
    out = ["## The waiting room: joins and polls beside the sold-out path", ""]
    return [*out, *fmt.provenance(data), *fmt.table(head, rows)]
