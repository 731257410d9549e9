"""``fleet up|down|status``: gateway hosts in namespaces, haproxy in front, the sold-out agent.

Everything started is recorded as a PID file under ``paths(cfg).root / "pids"`` (flashsale/stack's
``Managed``), so ``down`` stops exactly that; the network is found by the fleet's name
(``fleet_name``): fleets of other names are left alone.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from flashsale.fleet import haproxy, namespaces
from flashsale.fleet.namespaces import Host
from flashsale.stack.processes import (
    Managed,
    StackError,
    http_ready,
    port_open,
    settings_env,
    wait_until,
)
from kernel.settings import PREFIX, Settings, load_settings

READY_TIMEOUT_S = 60.0
AGENT_MARKER = "flashsale.fleet.agent"
PRIVATE_SLOTS = 9


@contextmanager
def private(cfg: Settings, prefix: str) -> Iterator[Settings]:
    """Settings for a fleet of one's own (a test's, a benchmark's): the first free slot k of
    ``PRIVATE_SLOTS`` gives the name ``<prefix><k>``, subnet 10.78.<k>.0/24 and balancer port
    18500 + 10k, held by a lock file while the block runs, so runs beside each other (and the
    default fleet, 10.77.0.0/24 on 18500) never meet. The lock is the slot's, whatever the
    prefix: the subnet and the port are. A slot's leftovers (a run killed mid-way) under this
    prefix are removed by its next holder. The locks live in the machine's temporary directory,
    not the state directory: namespaces, subnets and ports are the machine's, and two stacks
    (one per test worker) must not both take slot 1."""
    locks = Path(tempfile.gettempdir()) / "flashsale-fleet-slots"
    locks.mkdir(parents=True, exist_ok=True)
    for k in range(1, PRIVATE_SLOTS + 1):
        with open(locks / f"slot{k}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            mine = dataclasses.replace(
                cfg,
                fleet_name=f"{prefix}{k}",
                fleet_subnet=f"10.78.{k}.0/24",
                fleet_balancer_port=18500 + 10 * k,
            )
            down(mine)
            yield mine
            return
    raise StackError(f"all {PRIVATE_SLOTS} private fleet slots are in use")


@dataclass(frozen=True, slots=True)
class Paths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "haproxy.cfg"

    @property
    def socket(self) -> Path:
        return self.root / "haproxy.sock"

    @property
    def agent_ready(self) -> Path:
        return self.root / "agent.ready"

    @property
    def hosts_file(self) -> Path:
        return self.root / "hosts.json"


def paths(cfg: Settings) -> Paths:
    """The default fleet's files are in <state>/fleet, another name's in <state>/fleet-<name>."""
    name = namespaces.name(cfg)
    return Paths(cfg.state_dir / ("fleet" if name == namespaces.DEFAULT_NAME else f"fleet-{name}"))


def gateway(cfg: Settings, host: Host) -> Managed:
    return Managed(f"gw{host.index}", paths(cfg).root)


def balancer(cfg: Settings) -> Managed:
    return Managed("haproxy", paths(cfg).root)


def agent(cfg: Settings) -> Managed:
    """The agent's supervisor (flashsale/fleet/supervise.py), which restarts the agent."""
    return Managed("agent", paths(cfg).root)


def agent_child(cfg: Settings) -> Managed:
    """The sold-out agent itself, started (and started again) by its supervisor."""
    return Managed("agent-child", paths(cfg).root)


def agent_ready(cfg: Settings) -> bool:
    """The running agent has subscribed to the stock events (it wrote its PID there then)."""
    pid = agent_child(cfg).pid()
    try:
        return pid is not None and paths(cfg).agent_ready.read_text() == str(pid)
    except OSError:
        return False


def balancer_url(cfg: Settings) -> str:
    return f"http://127.0.0.1:{cfg.fleet_balancer_port}"


def operator_port(cfg: Settings) -> int:
    return cfg.fleet_balancer_port + 1


def operator_url(cfg: Settings) -> str:
    """The balancer's listener for every route (admin, vouchers, metrics), loopback only."""
    return f"http://127.0.0.1:{operator_port(cfg)}"


def gateway_url(cfg: Settings, host: Host) -> str:
    return f"http://{host.address}:{cfg.gateway_port}"


def _record(cfg: Settings) -> dict[str, object]:
    """What `up` recorded: the gateway count and the settings it gave the fleet."""
    try:
        record = json.loads(paths(cfg).hosts_file.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def current_hosts(cfg: Settings) -> list[Host]:
    count = _record(cfg).get("gateways")
    return namespaces.hosts(cfg, count) if isinstance(count, int) else []


def _overlay(cfg: Settings, extra: Mapping[str, str]) -> Settings:
    """``cfg`` with the fleet's own settings on top (those its gateways get as variables): the
    balancer's limits and the agent's bound are the gateways'."""
    parsed = load_settings(extra)
    names = [f.name for f in dataclasses.fields(Settings) if PREFIX + f.name.upper() in extra]
    return dataclasses.replace(cfg, **{n: getattr(parsed, n) for n in names})


def _gateway_env(cfg: Settings, host: Host, extra: Mapping[str, str]) -> dict[str, str]:
    """The stack by the bridge's address (over the veth), X-Forwarded-For believed only from
    the balancer, whose connections come from that same address."""
    bridge = namespaces.bridge_address(cfg)
    over = tuple(f"{bridge}:{a.rsplit(':', 1)[1]}" for a in cfg.redis_nodes)
    kafka = ",".join(f"{bridge}:{a.rsplit(':', 1)[1]}" for a in cfg.kafka_bootstrap.split(","))
    values = settings_env(
        gateway_host=host.address,
        gateway_port=cfg.gateway_port,
        trusted_proxies=(f"{bridge}/32",),
        redis_nodes=over,
        kafka_bootstrap=kafka,
        pg_dsn=cfg.pg_dsn.replace("127.0.0.1", bridge),
    )
    return {PREFIX + "ENV": "local", **os.environ, **values, **extra}


def up(
    cfg: Settings,
    gateways: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    cores: str | None = None,
) -> list[Host]:
    """A fleet of ``gateways`` hosts (default 2), or, if this fleet is partly up, what of it is
    missing (`repair`). ``cores`` (a taskset list): every process of the fleet runs there (a
    benchmark's)."""
    if _record(cfg) or namespaces.leftovers(cfg) or any(m.pid() for m in _managed(cfg)):
        repair(cfg, gateways, extra_env, cores)
        return current_hosts(cfg)
    if port_open(f"127.0.0.1:{cfg.fleet_balancer_port}"):
        raise StackError(f"port {cfg.fleet_balancer_port} is taken: another fleet's balancer?")
    extra = dict(extra_env or {})
    root = paths(cfg)
    root.root.mkdir(parents=True, exist_ok=True)
    hosts = namespaces.hosts(cfg, gateways or 2)
    root.hosts_file.write_text(json.dumps({"gateways": len(hosts), "env": extra}))
    try:
        namespaces.create_bridge(cfg)
        for host in hosts:
            namespaces.create_host(cfg, host)
        pin = ["taskset", "-c", cores] if cores else []
        _start_gateways(cfg, hosts, extra, pin)
        _start_balancer(cfg, hosts, extra, pin)
        _start_agent(cfg, extra, pin)
    except BaseException:
        down(cfg)
        raise
    return hosts


def repair(
    cfg: Settings,
    gateways: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    cores: str | None = None,
) -> list[str]:
    """Start what of a partly-up fleet is not running (a gateway, haproxy, the agent), with the
    settings `up` gave it, never touching what runs. Returns what it started."""
    record = _record(cfg)
    hosts = current_hosts(cfg)
    if not hosts:
        raise StackError("a fleet of this name is left over without its record: `fleet down` first")
    if gateways is not None and gateways != len(hosts):
        raise StackError(f"the fleet is up with {len(hosts)} gateways: `fleet down` to change that")
    recorded = record.get("env")
    extra = dict(
        extra_env if extra_env is not None else recorded if isinstance(recorded, dict) else {}
    )
    pin = ["taskset", "-c", cores] if cores else []
    if not namespaces.has_bridge(cfg):
        namespaces.create_bridge(cfg)
    present = set(namespaces.existing_namespaces(cfg))
    for host in hosts:
        if host.netns not in present:
            namespaces.create_host(cfg, host)
    missing = [h for h in hosts if gateway(cfg, h).pid() is None]
    _start_gateways(cfg, missing, extra, pin)
    started = [f"gw{h.index}" for h in missing]
    if balancer(cfg).pid() is None:
        _start_balancer(cfg, hosts, extra, pin)
        started.append("haproxy")
    if agent(cfg).pid() is None:
        _start_agent(cfg, extra, pin)
        started.append("agent")
    return started


def _start_gateways(
    cfg: Settings, hosts: list[Host], extra: Mapping[str, str], pin: list[str]
) -> None:
    for host in hosts:
        argv = ["ip", "netns", "exec", host.netns, *pin, sys.executable, "-m", "gateway"]
        env = _gateway_env(cfg, host, extra)
        gateway(cfg, host).start(argv, marker="-m gateway", env=env)
    for host in hosts:
        _wait(gateway(cfg, host), http_ready(f"{gateway_url(cfg, host)}/readyz"), host.netns)


def _start_balancer(
    cfg: Settings, hosts: list[Host], extra: Mapping[str, str], pin: list[str]
) -> None:
    root = paths(cfg)
    edge = haproxy.Edge.of(_overlay(cfg, extra))  # the limits its gateways keep, once for all
    text = haproxy.render(
        hosts,
        cfg.gateway_port,
        cfg.fleet_balancer_port,
        root.socket,
        root.root / "haproxy.pid",
        edge,
        operator_port(cfg),
        haproxy.write_key(edge, root.root),
    )
    root.config.write_text(text)
    managed = balancer(cfg)
    argv = [*pin, "haproxy", "-db", "-f", str(root.config)]
    managed.start(argv, marker="haproxy", env={**os.environ, **edge.environment()})

    def all_up() -> bool:
        states = haproxy.server_states(root.socket)
        return port_open(f"127.0.0.1:{cfg.fleet_balancer_port}") and all(
            states.get(f"gw{h.index}") == "UP" for h in hosts
        )

    _wait(managed, all_up, "haproxy")


def _start_agent(cfg: Settings, extra: Mapping[str, str], pin: list[str]) -> None:
    """The agent, under a supervisor that starts it again whenever it exits; it reads the
    settings the gateways got (its flag bound is theirs). An agent its dead supervisor left
    behind is stopped first: one agent per fleet."""
    root = paths(cfg)
    agent_child(cfg).stop(timeout=10.0)
    root.agent_ready.unlink(missing_ok=True)
    child = [*pin, sys.executable, "-m", AGENT_MARKER, str(root.socket), str(root.agent_ready)]
    argv = [sys.executable, "-m", "flashsale.fleet.supervise", str(root.root)]
    argv += [agent_child(cfg).name, AGENT_MARKER, *child]
    env = {PREFIX + "ENV": "local", **os.environ, **extra}
    agent(cfg).start(argv, marker="flashsale.fleet.supervise", env=env)
    _wait(agent(cfg), lambda: agent_ready(cfg), "sold-out agent")


def _wait(managed: Managed, ready: Callable[[], bool], name: str) -> None:
    if not wait_until(lambda: not _alive(managed) or ready(), READY_TIMEOUT_S):
        raise StackError(f"{name} not ready after {READY_TIMEOUT_S:.0f}s; see {managed.log_file}")
    if not _alive(managed):
        raise StackError(f"{name} exited; see {managed.log_file}")


def _alive(managed: Managed) -> bool:
    """The recorded PID still runs, whatever its command line: until the child has exec'd
    (``Managed.pid`` checks the program) it still shows ours."""
    try:
        pid = int(managed.pid_file.read_text().split()[0])
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state != "Z"


def _managed(cfg: Settings) -> list[Managed]:
    pids = paths(cfg).root / "pids"
    names = sorted(p.stem for p in pids.glob("*.pid")) if pids.is_dir() else []
    return [Managed(name, paths(cfg).root) for name in names]


def running(cfg: Settings) -> list[tuple[str, int]]:
    """(name, PID) of what ``down`` would stop now; ``namespaces.leftovers`` is what of the
    network it would delete."""
    found = [(m.name, m.pid()) for m in _managed(cfg)]
    return [(name, pid) for name, pid in found if pid is not None]


def down(cfg: Settings) -> list[str]:
    """Stop what up started (agent, balancer, gateways: by PID file), then delete the network."""
    stopped = [m.name for m in _managed(cfg) if m.stop(timeout=15.0)]
    namespaces.remove_all(cfg)
    paths(cfg).hosts_file.unlink(missing_ok=True)
    return stopped


def status(cfg: Settings) -> list[dict[str, object]]:
    """One row per gateway host, then the balancer and the agent (its supervisor's PID too)."""
    root = paths(cfg)
    try:
        states = haproxy.server_states(root.socket) if balancer(cfg).pid() else {}
    except OSError:
        states = {}
    rows: list[dict[str, object]] = []
    for host in current_hosts(cfg):
        rows.append(
            {
                "name": f"gw{host.index}",
                "netns": host.netns,
                "address": f"{host.address}:{cfg.gateway_port}",
                "pid": gateway(cfg, host).pid(),
                "ready": http_ready(f"{gateway_url(cfg, host)}/readyz")(),
                "balancer": states.get(f"gw{host.index}", "-"),
            }
        )
    pid = balancer(cfg).pid()
    rows.append(
        {
            "name": "haproxy",
            "address": balancer_url(cfg),
            "operators": operator_url(cfg),
            "pid": pid,
            "ready": pid is not None and bool(states),
        }
    )
    pid, supervisor = agent_child(cfg).pid(), agent(cfg).pid()
    rows.append(
        {
            "name": "agent",
            "address": str(root.socket),
            "pid": pid,
            "supervisor": supervisor,
            "ready": supervisor is not None and agent_ready(cfg),
        }
    )
    return rows
