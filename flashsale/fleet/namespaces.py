"""Fleet "hosts": one network namespace each, joined to a host bridge by a veth pair.

The stack's servers listen on 127.0.0.1 and announce 127.0.0.1 (Redis CLUSTER SLOTS, Kafka's
advertised listeners), which inside a namespace names the namespace's own loopback. So each
namespace rewrites its connections to those ports towards the host's bridge address (they leave
through the veth), and the host maps that address back to its loopback. The namespaces get no
default route: nothing in them can reach an address outside the fleet's /24.

Every name a fleet creates starts with its name (``fleet_name``, default ``fsf``), so fleets of
other names (with their own subnets and balancer ports) run beside it and ``down`` deletes only
its own.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from flashsale.stack.processes import StackError, run
from kernel.settings import Settings

NS_TABLE = "fleet_host"  # each namespace's own table
CUT_TABLE = "fleet_cut"  # a partition: added by cut(), removed by heal()
_NAME = re.compile(r"[a-z][a-z0-9]{0,7}")  # interface names stay within 15 characters
GATEWAY, CLIENT = "gw", "cl"
DEFAULT_NAME = Settings().fleet_name  # the one `flashsale fleet` uses unless told otherwise
FIRST_CLIENT = 220  # clients are .221 ... .250; gateways .11 ... .210


def name(cfg: Settings) -> str:
    """The fleet's name, checked: every name it creates starts with it and a dash."""
    if not _NAME.fullmatch(cfg.fleet_name):
        raise StackError(f"fleet name {cfg.fleet_name!r}: 1-8 of a-z, 0-9, starting with a letter")
    return cfg.fleet_name


def bridge(cfg: Settings) -> str:
    return f"{name(cfg)}-br0"


def host_table(cfg: Settings) -> str:  # the host's nftables table
    return f"{name(cfg)}_fleet"


@dataclass(frozen=True, slots=True)
class Host:
    """A "host": a namespace with one address on the fleet's bridge, running gateways (``gw``)
    or load clients (``cl``)."""

    index: int  # 1..N
    address: str
    fleet: str = DEFAULT_NAME
    role: str = GATEWAY

    @property
    def netns(self) -> str:
        return f"{self.fleet}-{self.role}{self.index}"

    @property
    def outer(self) -> str:  # the veth end on the bridge (links and namespaces: apart)
        return f"{self.fleet}-{self.role}{self.index}"

    @property
    def inner(self) -> str:  # the veth end inside the namespace
        return f"{self.fleet}-{self.role}{self.index}i"


def bridge_address(cfg: Settings) -> str:
    return str(next(ipaddress.ip_network(cfg.fleet_subnet).hosts()))


def hosts(cfg: Settings, count: int) -> list[Host]:
    net = ipaddress.ip_network(cfg.fleet_subnet)
    return [Host(i, str(net.network_address + 10 + i), name(cfg)) for i in range(1, count + 1)]


def clients(cfg: Settings, count: int) -> list[Host]:
    """Load-client hosts: each its own source address towards the balancer."""
    if not 1 <= count <= 30:
        raise StackError("between 1 and 30 client hosts")
    net = ipaddress.ip_network(cfg.fleet_subnet)
    return [
        Host(i, str(net.network_address + FIRST_CLIENT + i), name(cfg), CLIENT)
        for i in range(1, count + 1)
    ]


def stack_ports(cfg: Settings) -> list[int]:
    """Every port a gateway opens towards the stack: Redis nodes (those configured and those
    the cluster announces: replicas added later), Kafka brokers, PostgreSQL."""
    redis = [int(a.rsplit(":", 1)[1]) for a in cfg.redis_nodes] + _cluster_ports(cfg)
    kafka_first = int(cfg.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])
    kafka = [kafka_first + 2 * n for n in range(cfg.kafka_brokers)]
    return sorted({*redis, *kafka, cfg.pg_port})


def _cluster_ports(cfg: Settings) -> list[int]:
    host, port = cfg.redis_nodes[0].rsplit(":", 1)
    nodes = run(["redis-cli", "-h", host, "-p", port, "cluster", "nodes"], check=False).stdout
    # Each line: <id> <ip>:<port>@<bus port> <flags> ...
    return [int(line.split()[1].split("@")[0].rsplit(":", 1)[1]) for line in nodes.splitlines()]


def _ports(ports: Iterable[int]) -> str:
    return "{ " + ", ".join(str(p) for p in ports) + " }"


def _nft(script: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    argv = [*prefix, "nft", "-f", "-"]
    done = subprocess.run(argv, input=script, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise StackError(f"{' '.join(argv)} failed: {done.stderr}\n{script}")


def _in(netns: str, *argv: str) -> None:
    run(["ip", "netns", "exec", netns, *argv])


def create_bridge(cfg: Settings) -> None:
    """The host's side: the bridge, its address, and the map from it to the stack's loopback.

    PostgreSQL trusts only 127.0.0.1, so forwarded connections are given that source too, except
    those to the balancer, which must see each client's own address (its X-Forwarded-For).
    route_localnet (on our bridge only) lets the kernel route a DNAT to 127.0.0.1 at all."""
    _check_free(cfg)
    prefix = ipaddress.ip_network(cfg.fleet_subnet).prefixlen
    br = bridge(cfg)
    run(["ip", "link", "add", br, "type", "bridge"])
    run(["ip", "addr", "add", f"{bridge_address(cfg)}/{prefix}", "dev", br])
    run(["ip", "link", "set", br, "up"])
    run(["sysctl", "-qw", f"net.ipv4.conf.{br}.route_localnet=1"])
    ports = _ports([*stack_ports(cfg), cfg.fleet_balancer_port])
    _nft(
        f"""table ip {host_table(cfg)} {{
  chain prerouting {{ type nat hook prerouting priority dstnat;
    iifname "{br}" ip daddr {bridge_address(cfg)} tcp dport {ports} dnat to 127.0.0.1
  }}
  chain input {{ type nat hook input priority 100;
    iifname "{br}" ip daddr 127.0.0.1 tcp dport != {cfg.fleet_balancer_port} snat to 127.0.0.1
  }}
}}
"""
    )


def _check_free(cfg: Settings) -> None:
    """Another fleet (another name) on an overlapping subnet would take our routes."""
    ours = ipaddress.ip_network(cfg.fleet_subnet)
    out = run(["ip", "-o", "-4", "addr", "show"]).stdout
    for line in out.splitlines():
        dev, cidr = line.split()[1], line.split()[3]
        if ipaddress.ip_interface(cidr).network.overlaps(ours):
            raise StackError(f"{cfg.fleet_subnet} overlaps {cidr} on {dev}: pick another subnet")


def create_host(cfg: Settings, host: Host) -> None:
    """A namespace on the bridge. A gateway host reaches the stack's ports through the bridge;
    a client host reaches only the balancer (``127.0.0.1:<balancer port>`` inside it)."""
    prefix = ipaddress.ip_network(cfg.fleet_subnet).prefixlen
    run(["ip", "netns", "add", host.netns])
    run(["ip", "link", "add", host.outer, "type", "veth", "peer", "name", host.inner])
    run(["ip", "link", "set", host.inner, "netns", host.netns])
    run(["ip", "link", "set", host.outer, "master", bridge(cfg), "up"])
    _in(host.netns, "ip", "link", "set", "lo", "up")
    _in(host.netns, "ip", "addr", "add", f"{host.address}/{prefix}", "dev", host.inner)
    _in(host.netns, "ip", "link", "set", host.inner, "up")
    # A packet to 127.0.0.1 rewritten towards the bridge keeps its loopback source until
    # postrouting: the kernel routes it out of the veth only with route_localnet.
    _in(host.netns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
    _in(host.netns, "sysctl", "-qw", f"net.ipv4.conf.{host.inner}.route_localnet=1")
    ports = stack_ports(cfg) if host.role == GATEWAY else [cfg.fleet_balancer_port]
    _nft(
        f"""table ip {NS_TABLE} {{
  chain output {{ type nat hook output priority -100;
    ip daddr 127.0.0.1 tcp dport {_ports(ports)} dnat to {bridge_address(cfg)}
  }}
  chain postrouting {{ type nat hook postrouting priority srcnat;
    oifname "{host.inner}" ip saddr 127.0.0.0/8 masquerade
  }}
}}
""",
        host.netns,
    )


def cut(cfg: Settings, host: Host) -> None:
    """A partition: the host's packets to the stack are dropped inside its namespace (the
    balancer still reaches its gateway, so its /readyz can say so)."""
    _nft(
        f"""table ip {CUT_TABLE} {{
  chain output {{ type filter hook output priority filter;
    ip daddr {bridge_address(cfg)} tcp dport {_ports(stack_ports(cfg))} drop
  }}
}}
""",
        host.netns,
    )


def heal(host: Host) -> None:
    run(["ip", "netns", "exec", host.netns, "nft", "delete", "table", "ip", CUT_TABLE])


def existing_namespaces(cfg: Settings) -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{name(cfg)}-")]


def _host_veths(cfg: Settings) -> list[str]:
    out = run(["ip", "-o", "link", "show"]).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines())
    return [n for n in names if n.startswith(f"{name(cfg)}-") and n != bridge(cfg)]


def has_bridge(cfg: Settings) -> bool:
    return run(["ip", "link", "show", bridge(cfg)], check=False).returncode == 0


def remove_all(cfg: Settings) -> None:
    """Delete every namespace, veth, bridge and table this fleet (by its name) made, and nothing
    else. The veths go first, by hand: a deleted namespace takes its pair with it only when the
    kernel gets round to freeing it, and a quick `up` again would find the names taken."""
    for veth in _host_veths(cfg):
        run(["ip", "link", "delete", veth], check=False)
    for netns in existing_namespaces(cfg):
        run(["ip", "netns", "delete", netns])
    if has_bridge(cfg):
        run(["ip", "link", "delete", bridge(cfg)])
    if run(["nft", "list", "table", "ip", host_table(cfg)], check=False).returncode == 0:
        run(["nft", "delete", "table", "ip", host_table(cfg)])


def leftovers(cfg: Settings) -> list[str]:
    """What of this fleet's network still exists (empty after a clean down)."""
    found = existing_namespaces(cfg) + _host_veths(cfg)
    if has_bridge(cfg):
        found.append(bridge(cfg))
    if run(["nft", "list", "table", "ip", host_table(cfg)], check=False).returncode == 0:
        found.append(host_table(cfg))
    return found
