"""The balancer: its configuration (deploy/haproxy/haproxy.cfg.tmpl) and its runtime API."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from string import Template

from flashsale.fleet.namespaces import Host
from gateway.responses import SOLD_OUT_BODY
from kernel.settings import PROJECT_ROOT

TEMPLATE = PROJECT_ROOT / "deploy" / "haproxy" / "haproxy.cfg.tmpl"


def render(
    hosts: Sequence[Host],
    gateway_port: int,
    port: int,
    socket_path: Path,
    map_path: Path,
    pidfile: Path,
) -> str:
    body = SOLD_OUT_BODY.decode()
    if "'" in body:  # inside single quotes haproxy takes every other character literally
        raise ValueError("the sold-out body cannot be quoted for haproxy")
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
        sold_out_body=body,
        soldout_map=map_path,
        servers=servers,
    )


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


def server_states(socket_path: Path) -> dict[str, str]:
    """Each gateway server's state as the balancer sees it: UP, DOWN, ..."""
    out = command(socket_path, "show stat")
    header, *rows = [line for line in out.splitlines() if line]
    names = header.lstrip("# ").split(",")
    states = {}
    for row in rows:
        cells = dict(zip(names, row.split(","), strict=False))
        if cells.get("pxname") == "gateways" and cells.get("svname") not in ("BACKEND", None):
            states[cells["svname"]] = cells.get("status", "?")
    return states
