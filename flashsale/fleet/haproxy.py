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

from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import port_open, process_group, wait_ready
from gateway.admission import OVERLOADED
from gateway.responses import SOLD_OUT_BODY, encode
from kernel.resources import asset
from kernel.settings import Settings, settings

TEMPLATE = asset("deploy", "haproxy", "haproxy.cfg.tmpl")


@dataclass(frozen=True, slots=True)
class Edge:
    """The balancer's overload and connection limits (Settings ``edge_*``)."""

    server_maxconn: int
    queue_per_server: int
    queue_timeout_ms: int
    maxconn: int

    @classmethod
    def of(cls, cfg: Settings) -> Edge:
        return cls(
            cfg.edge_server_maxconn,
            cfg.edge_queue_per_server,
            cfg.edge_queue_timeout_ms,
            cfg.edge_maxconn,
        )


def _quoted(body: bytes) -> str:
    text = body.decode()
    if "'" in text:  # inside single quotes haproxy takes every other character literally
        raise ValueError(f"{text} cannot be quoted for haproxy")
    return text


def render(
    hosts: Sequence[Host],
    gateway_port: int,
    port: int,
    socket_path: Path,
    map_path: Path,
    pidfile: Path,
    edge: Edge,
) -> str:
    servers = "\n".join(
        line
        for h in hosts
        for line in (
            f"    server gw{h.index} {h.address}:{gateway_port} check",
            f"    server gw{h.index}-open {h.address}:{gateway_port} backup",
        )
    )
    return Template(TEMPLATE.read_text()).substitute(
        socket=socket_path,
        pidfile=pidfile,
        port=port,
        maxconn=edge.maxconn,
        queue_ms=edge.queue_timeout_ms,
        server_maxconn=edge.server_maxconn,
        max_queue=max(1, edge.queue_per_server * len(hosts)),
        overloaded_body=_quoted(encode(OVERLOADED.body())),
        retry_after=OVERLOADED.retry_after,
        sold_out_body=_quoted(SOLD_OUT_BODY),
        soldout_map=map_path,
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
    sock, soldout_map, config = (
        workdir / "haproxy.sock",
        workdir / "soldout.map",
        workdir / "haproxy.cfg",
    )
    soldout_map.write_text("")
    text = render(
        [Host(1, host)],
        int(gateway_port),
        port,
        sock,
        soldout_map,
        workdir / "pid",
        edge or Edge.of(settings()),
    )
    config.write_text(text)
    with process_group([*prefix, "haproxy", "-db", "-f", str(config)], log=log) as proc:

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
