"""The balancer: its configuration (deploy/haproxy/haproxy.cfg.tmpl) and its runtime API.

The one renderer of haproxy's configuration: the fleet's balancer and the benchmarks' edge in
front of one gateway process (loadtest/bench/overload.py, starvation.py, balancer.py) are
all this text."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

from flashsale.fleet import client_buckets
from flashsale.fleet.client_buckets import Bucket, BuyerTokens
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import port_open, process_group, wait_ready
from gateway.admission import OVERLOADED
from gateway.errors import NotFound, RateLimited
from gateway.responses import SOLD_OUT_BODY, encode
from kernel.resources import asset
from kernel.settings import Settings, settings

TEMPLATE = asset("deploy", "haproxy", "haproxy.cfg.tmpl")
CLIENT_BUCKET_LUA = TEMPLATE.with_name("client_bucket.lua")
SOLD_OUT_TABLE = "soldout"  # the frontend's sold-out entries: purchase paths, with an expire
KEY_FILE = "jwt_public_key.pem"  # beside the configuration, when buyer tokens are RS or ES


@dataclass(frozen=True, slots=True)
class Edge:
    """The balancer's overload and connection limits (Settings ``edge_*``), the per-client
    buckets it keeps for every gateway behind it (per address: ``ip_rate_per_s``,
    ``ip_burst``; per buyer: ``user_rate_per_s``, ``user_burst``; per address on a waiting
    room's join: ``waiting_room_join_address_*``; the last two with how it verifies buyer
    tokens; None: none), the paths its public listener forwards, and how long a sold-out entry
    lives past its last confirmation (``sold_out_flag_ttl_ms``)."""

    server_maxconn: int
    queue_per_server: int
    queue_timeout_ms: int
    maxconn: int
    address_bucket: Bucket | None = None
    public_prefixes: tuple[str, ...] = ("/",)
    sold_out_ttl_ms: int = 1000
    buyer_bucket: Bucket | None = None
    buyer_tokens: BuyerTokens | None = None
    keepalive_ms: int = 1000
    join_bucket: Bucket | None = None
    request_timeout_ms: int = 2000

    @classmethod
    def of(cls, cfg: Settings) -> Edge:
        return cls(
            cfg.edge_server_maxconn,
            cfg.edge_queue_per_server,
            cfg.edge_queue_timeout_ms,
            cfg.edge_maxconn,
            (cfg.ip_rate_per_s, cfg.ip_burst),
            cfg.edge_public_prefixes,
            cfg.sold_out_flag_ttl_ms,
            (cfg.user_rate_per_s, cfg.user_burst),
            BuyerTokens.of(cfg),
            cfg.edge_keepalive_ms,
            (cfg.waiting_room_join_address_rate_per_s, cfg.waiting_room_join_address_burst),
            cfg.edge_request_timeout_ms,
        )

    def verifies_tokens(self) -> BuyerTokens | None:
        """How it verifies buyer tokens, if a bucket it keeps needs them (None: none does)."""
        if self.buyer_bucket is None and self.join_bucket is None:
            return None
        return self.buyer_tokens

    def environment(self) -> dict[str, str]:
        """What haproxy's process needs in its environment for this edge (the key it verifies
        buyer tokens with, kept out of the configuration's text)."""
        tokens = self.verifies_tokens()
        return {} if tokens is None else tokens.environment()


def write_key(edge: Edge, directory: Path) -> Path | None:
    """The public key buyer tokens are verified with, written where the configuration that
    `render` gives ``directory / KEY_FILE`` finds it; None: no key file is needed."""
    tokens = edge.verifies_tokens()
    if tokens is None or not tokens.public_key:
        return None
    path = directory / KEY_FILE
    path.write_text(tokens.public_key)
    return path


def _quoted(body: bytes) -> str:
    text = body.decode()
    if "'" in text:  # inside single quotes haproxy takes every other character literally
        raise ValueError(f"{text} cannot be quoted for haproxy")
    return text


def _client_buckets(edge: Edge, key_file: Path | None) -> str:
    return client_buckets.render(
        _quoted(encode(RateLimited(retry_after=1).body())),
        edge.address_bucket,
        edge.buyer_bucket,
        edge.buyer_tokens,
        key_file,
        edge.join_bucket,
    )


def _operators(operator_port: int | None) -> str:
    if operator_port is None:
        return ""
    return (
        "\nfrontend operators\n"
        "    # Every route (admin, vouchers, metrics), on this machine's loopback only: the\n"
        "    # operators' way in, the public listener above being the buyers'.\n"
        f"    bind 127.0.0.1:{operator_port}\n"
        "    default_backend gateways\n"
    )


def render(
    hosts: Sequence[Host],
    gateway_port: int,
    port: int,
    socket_path: Path,
    pidfile: Path,
    edge: Edge,
    operator_port: int | None = None,
    key_file: Path | None = None,
) -> str:
    """The configuration; ``key_file``: where `write_key` put the public key, if it did."""
    servers = "\n".join(
        line
        for h in hosts
        for line in (
            f"    server gw{h.index} {h.address}:{gateway_port} check",
            f"    server gw{h.index}-open {h.address}:{gateway_port} backup",
        )
    )
    return Template(TEMPLATE.read_text()).substitute(
        guard=client_buckets.guard(edge.verifies_tokens()),
        socket=socket_path,
        pidfile=pidfile,
        port=port,
        maxconn=edge.maxconn,
        queue_ms=edge.queue_timeout_ms,
        keepalive_ms=edge.keepalive_ms,
        request_timeout_ms=edge.request_timeout_ms,
        server_maxconn=edge.server_maxconn,
        max_queue=max(1, edge.queue_per_server * len(hosts)),
        overloaded_body=_quoted(encode(OVERLOADED.body())),
        retry_after=OVERLOADED.retry_after,
        sold_out_body=_quoted(SOLD_OUT_BODY),
        sold_out_ttl_ms=edge.sold_out_ttl_ms,
        not_found_body=_quoted(encode(NotFound().body())),
        public_prefixes=" ".join(edge.public_prefixes),
        client_bucket_lua=CLIENT_BUCKET_LUA,
        client_buckets=_client_buckets(edge, key_file),
        operators=_operators(operator_port),
        servers=servers,
    )


@dataclass(frozen=True, slots=True)
class Balancer:
    base: str
    pid: int  # also its session id (process_group starts it in a session of its own)
    socket: Path


@contextlib.contextmanager
def serving(
    gateway: str,
    port: int,
    workdir: Path,
    edge: Edge | None = None,
    prefix: Sequence[str] = (),
    log: Path | None = None,
) -> Iterator[Balancer]:
    """haproxy on 127.0.0.1:``port`` in front of the one gateway at ``gateway`` (host:port),
    with the fleet's configuration, for the block (``prefix``: e.g. a taskset command)."""
    host, gateway_port = gateway.rsplit(":", 1)
    workdir.mkdir(parents=True, exist_ok=True)
    sock, config = workdir / "haproxy.sock", workdir / "haproxy.cfg"
    edge = edge or Edge.of(settings())
    key_file = write_key(edge, workdir)
    hosts = [Host(1, host)]
    text = render(hosts, int(gateway_port), port, sock, workdir / "pid", edge, None, key_file)
    config.write_text(text)
    argv = [*prefix, "haproxy", "-db", "-f", str(config)]
    with process_group(argv, log=log, env=edge.environment()) as proc:

        def ready() -> bool:
            return port_open(f"127.0.0.1:{port}") and server_states(sock).get("gw1") == "UP"

        wait_ready(proc, lambda: _quiet(ready), 30.0, "haproxy", log)
        yield Balancer(f"http://127.0.0.1:{port}", proc.pid, sock)


def _quiet(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except OSError:  # its socket not there yet
        return False


def command(socket_path: Path, line: str, timeout: float = 2.0) -> str:
    """One runtime API command; haproxy answers and closes (non-interactive mode)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(socket_path))
        conn.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def table_entries(shown: str) -> dict[str, int]:
    """``show table`` parsed: each key and the ms left before it expires. A line is
    ``0x55...: key=/api/flash-sales/items/7/purchase use=0 exp=734 gpt0=1``."""
    entries: dict[str, int] = {}
    for line in shown.splitlines():
        cells = dict(c.split("=", 1) for c in line.split()[1:] if "=" in c)
        if "key" in cells and cells.get("exp", "").isdigit():
            entries[cells["key"]] = int(cells["exp"])
    return entries


def set_sold_out(path: str) -> str:
    """The command that sets (or refreshes: its expire starts again) a sold-out entry."""
    return f"set table {SOLD_OUT_TABLE} key {path} data.gpt0 1"


def clear_sold_out(path: str | None = None) -> str:
    """The command that clears one entry, or every one."""
    return f"clear table {SOLD_OUT_TABLE}" + (f" key {path}" if path else "")


def sold_out_paths(socket_path: Path) -> dict[str, int]:
    """The balancer's sold-out entries: purchase path → ms it has left."""
    return table_entries(command(socket_path, f"show table {SOLD_OUT_TABLE}"))


def _stat_rows(socket_path: Path) -> list[dict[str, str]]:
    out = command(socket_path, "show stat")
    header, *rows = [line for line in out.splitlines() if line]
    names = header.lstrip("# ").split(",")
    return [dict(zip(names, row.split(","), strict=False)) for row in rows]


def server_states(socket_path: Path) -> dict[str, str]:
    """Each gateway server's state as the balancer sees it: UP, DOWN, ..."""
    return {
        cells["svname"]: cells.get("status", "?")
        for cells in _stat_rows(socket_path)
        if cells.get("pxname") == "gateways" and cells.get("svname") not in ("BACKEND", None)
    }


def queued(socket_path: Path) -> int:
    """Requests waiting in the gateways' queue now (their backend's ``qcur``)."""
    rows = _stat_rows(socket_path)
    return sum(
        int(r.get("qcur") or 0)
        for r in rows
        if r.get("pxname") == "gateways" and r.get("svname") == "BACKEND"
    )


def overload_counts(socket_path: Path) -> dict[str, int]:
    """Where the balancer's 503s came from: refused at once (the queue full), timed out in the
    queue, or the gateways' own; and the longest queue it held."""
    rows = {(r.get("pxname"), r.get("svname")): r for r in _stat_rows(socket_path)}

    def value(px: str, sv: str, name: str) -> int:
        return int(rows.get((px, sv), {}).get(name) or 0)

    gateways = sum(
        value("gateways", sv, "hrsp_5xx")
        for px, sv in rows
        if px == "gateways" and sv not in ("BACKEND", None)
    )
    # The frontend's own answers (``http-request return``) are its 410s and its queue-full 503s.
    own_4xx = value("purchases", "FRONTEND", "hrsp_4xx") - value("gateways", "BACKEND", "hrsp_4xx")
    at_once = value("purchases", "FRONTEND", "intercepted") - own_4xx
    answered = value("purchases", "FRONTEND", "hrsp_5xx")
    return {
        "refused_queue_full": at_once,
        "refused_queue_timeout": max(0, answered - at_once - gateways),
        "gateway_5xx": gateways,
        "queue_max": value("gateways", "BACKEND", "qmax"),
    }
