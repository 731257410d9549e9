"""Gateway "hosts": one network namespace each, joined to a host bridge by a veth pair.

The stack's servers listen on 127.0.0.1 and announce 127.0.0.1 (Redis CLUSTER SLOTS, Kafka's
advertised listeners), which inside a namespace names the namespace's own loopback. So each
namespace rewrites its connections to those ports towards the host's bridge address (they leave
through the veth), and the host maps that address back to its loopback. The namespaces get no
default route: nothing in them can reach an address outside the fleet's /24.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from flashsale.stack.processes import StackError, run
from kernel.settings import Settings

PREFIX = "fsf"  # every name the fleet creates starts with this: down deletes only those
BRIDGE = f"{PREFIX}-br0"
HOST_TABLE = f"{PREFIX}_fleet"  # the host's nftables table
NS_TABLE = f"{PREFIX}_host"  # each namespace's own table
CUT_TABLE = f"{PREFIX}_cut"  # a partition: added by cut(), removed by heal()


@dataclass(frozen=True, slots=True)
class Host:
    index: int  # 1..N
    address: str

    @property
    def netns(self) -> str:
        return f"{PREFIX}-gw{self.index}"

    @property
    def outer(self) -> str:  # the veth end on the bridge
        return f"{PREFIX}-h{self.index}"

    @property
    def inner(self) -> str:  # the veth end inside the namespace
        return f"{PREFIX}-n{self.index}"


def bridge_address(cfg: Settings) -> str:
    return str(next(ipaddress.ip_network(cfg.fleet_subnet).hosts()))


def hosts(cfg: Settings, count: int) -> list[Host]:
    net = ipaddress.ip_network(cfg.fleet_subnet)
    return [Host(i, str(net.network_address + 10 + i)) for i in range(1, count + 1)]


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

    PostgreSQL trusts only 127.0.0.1, so forwarded connections are given that source too.
    route_localnet (on our bridge only) lets the kernel route a DNAT to 127.0.0.1 at all."""
    prefix = ipaddress.ip_network(cfg.fleet_subnet).prefixlen
    run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "add", f"{bridge_address(cfg)}/{prefix}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    run(["sysctl", "-qw", f"net.ipv4.conf.{BRIDGE}.route_localnet=1"])
    ports = _ports(stack_ports(cfg))
    _nft(
        f"""table ip {HOST_TABLE} {{
  chain prerouting {{ type nat hook prerouting priority dstnat;
    iifname "{BRIDGE}" ip daddr {bridge_address(cfg)} tcp dport {ports} dnat to 127.0.0.1
  }}
  chain input {{ type nat hook input priority 100;
    iifname "{BRIDGE}" ip daddr 127.0.0.1 snat to 127.0.0.1
  }}
}}
"""
    )


def create_host(cfg: Settings, host: Host) -> None:
    prefix = ipaddress.ip_network(cfg.fleet_subnet).prefixlen
    run(["ip", "netns", "add", host.netns])
    run(["ip", "link", "add", host.outer, "type", "veth", "peer", "name", host.inner])
    run(["ip", "link", "set", host.inner, "netns", host.netns])
    run(["ip", "link", "set", host.outer, "master", BRIDGE, "up"])
    _in(host.netns, "ip", "link", "set", "lo", "up")
    _in(host.netns, "ip", "addr", "add", f"{host.address}/{prefix}", "dev", host.inner)
    _in(host.netns, "ip", "link", "set", host.inner, "up")
    # A packet to 127.0.0.1 rewritten towards the bridge keeps its loopback source until
    # postrouting: the kernel routes it out of the veth only with route_localnet.
    _in(host.netns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
    _in(host.netns, "sysctl", "-qw", f"net.ipv4.conf.{host.inner}.route_localnet=1")
    _nft(
        f"""table ip {NS_TABLE} {{
  chain output {{ type nat hook output priority -100;
    ip daddr 127.0.0.1 tcp dport {_ports(stack_ports(cfg))} dnat to {bridge_address(cfg)}
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


def existing_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}-gw")]


def _host_veths() -> list[str]:
    out = run(["ip", "-o", "link", "show"]).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines())
    return [name for name in names if name.startswith(f"{PREFIX}-h")]


def remove_all() -> None:
    """Delete every namespace, veth, bridge and table the fleet made, and nothing else.
    The veths go first, by hand: a deleted namespace takes its pair with it only when the
    kernel gets round to freeing it, and a quick `up` again would find the names taken."""
    for veth in _host_veths():
        run(["ip", "link", "delete", veth], check=False)
    for netns in existing_namespaces():
        run(["ip", "netns", "delete", netns])
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        run(["ip", "link", "delete", BRIDGE])
    if run(["nft", "list", "table", "ip", HOST_TABLE], check=False).returncode == 0:
        run(["nft", "delete", "table", "ip", HOST_TABLE])


def leftovers() -> list[str]:
    """What of the fleet's network still exists (empty after a clean down)."""
    found = existing_namespaces() + _host_veths()
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        found.append(BRIDGE)
    if run(["nft", "list", "table", "ip", HOST_TABLE], check=False).returncode == 0:
        found.append(HOST_TABLE)
    return found
