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
from kernel.settings import PREFIX, Settings

READY_TIMEOUT_S = 60.0
PRIVATE_SLOTS = 9


@contextmanager
def private(cfg: Settings, prefix: str) -> Iterator[Settings]:
    """Settings for a fleet of one's own (a test's, a benchmark's): the first free slot k of
    ``PRIVATE_SLOTS`` gives the name ``<prefix><k>``, subnet 10.78.<k>.0/24 and balancer port
    18500 + 10k, held by a lock file while the block runs, so runs beside each other (and the
    default fleet, 10.77.0.0/24 on 18500) never meet. The lock is the slot's, whatever the
    prefix: the subnet and the port are. A slot's leftovers (a run killed mid-way) under this
    prefix are removed by its next holder."""
    locks = cfg.state_dir / "fleet-slots"
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
    def soldout_map(self) -> Path:
        return self.root / "soldout.map"

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
    return Managed("agent", paths(cfg).root)


def balancer_url(cfg: Settings) -> str:
    return f"http://127.0.0.1:{cfg.fleet_balancer_port}"


def gateway_url(cfg: Settings, host: Host) -> str:
    return f"http://{host.address}:{cfg.gateway_port}"


def current_hosts(cfg: Settings) -> list[Host]:
    try:
        count = int(json.loads(paths(cfg).hosts_file.read_text())["gateways"])
    except (FileNotFoundError, ValueError, KeyError):
        return []
    return namespaces.hosts(cfg, count)


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
    gateways: int,
    extra_env: Mapping[str, str] | None = None,
    cores: str | None = None,
) -> list[Host]:
    """``cores`` (a taskset list): every process of the fleet runs there (a benchmark's)."""
    if namespaces.leftovers(cfg) or any(m.pid() for m in _managed(cfg)):
        raise StackError("the fleet is up already (or left over): `flashsale fleet down` first")
    if port_open(f"127.0.0.1:{cfg.fleet_balancer_port}"):
        raise StackError(f"port {cfg.fleet_balancer_port} is taken: another fleet's balancer?")
    root = paths(cfg)
    root.root.mkdir(parents=True, exist_ok=True)
    hosts = namespaces.hosts(cfg, gateways)
    root.hosts_file.write_text(json.dumps({"gateways": gateways}))
    try:
        namespaces.create_bridge(cfg)
        for host in hosts:
            namespaces.create_host(cfg, host)
        pin = ["taskset", "-c", cores] if cores else []
        for host in hosts:
            argv = ["ip", "netns", "exec", host.netns, *pin, sys.executable, "-m", "gateway"]
            env = _gateway_env(cfg, host, extra_env or {})
            gateway(cfg, host).start(argv, marker="-m gateway", env=env)
        for host in hosts:
            _wait(gateway(cfg, host), http_ready(f"{gateway_url(cfg, host)}/readyz"), host.netns)
        _start_balancer(cfg, hosts, pin)
        _start_agent(cfg, extra_env or {}, pin)
    except BaseException:
        down(cfg)
        raise
    return hosts


def _start_balancer(cfg: Settings, hosts: list[Host], pin: list[str]) -> None:
    root = paths(cfg)
    root.soldout_map.write_text("")
    text = haproxy.render(
        hosts,
        cfg.gateway_port,
        cfg.fleet_balancer_port,
        root.socket,
        root.soldout_map,
        root.root / "haproxy.pid",
        haproxy.Edge.of(cfg),  # the fleet's own settings, as its gateways and agent get them
    )
    root.config.write_text(text)
    managed = balancer(cfg)
    managed.start([*pin, "haproxy", "-db", "-f", str(root.config)], marker="haproxy")

    def all_up() -> bool:
        states = haproxy.server_states(root.socket)
        return port_open(f"127.0.0.1:{cfg.fleet_balancer_port}") and all(
            states.get(f"gw{h.index}") == "UP" for h in hosts
        )

    _wait(managed, all_up, "haproxy")


def _start_agent(cfg: Settings, extra: Mapping[str, str], pin: list[str]) -> None:
    """The agent reads the settings the gateways got (its flag bound is theirs)."""
    root = paths(cfg)
    root.agent_ready.unlink(missing_ok=True)
    managed = agent(cfg)
    argv = [*pin, sys.executable, "-m", "flashsale.fleet.agent"]
    argv += [str(root.socket), str(root.soldout_map), str(root.agent_ready)]
    env = {PREFIX + "ENV": "local", **os.environ, **extra}
    managed.start(argv, marker="flashsale.fleet.agent", env=env)
    _wait(managed, root.agent_ready.exists, "sold-out agent")


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


def down(cfg: Settings) -> list[str]:
    """Stop what up started (agent, balancer, gateways: by PID file), then delete the network."""
    stopped = [m.name for m in _managed(cfg) if m.stop(timeout=15.0)]
    namespaces.remove_all(cfg)
    paths(cfg).hosts_file.unlink(missing_ok=True)
    return stopped


def status(cfg: Settings) -> list[dict[str, object]]:
    """One row per gateway host, then the balancer and the agent."""
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
    for name, managed in (("haproxy", balancer(cfg)), ("agent", agent(cfg))):
        where = balancer_url(cfg) if name == "haproxy" else str(root.soldout_map)
        pid = managed.pid()
        rows.append({"name": name, "address": where, "pid": pid, "ready": pid is not None})
    return rows
