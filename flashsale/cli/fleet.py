"""``flashsale fleet up|down|status``: gateway hosts in namespaces behind haproxy."""

from __future__ import annotations

import argparse

from flashsale.cli.output import note, print_json, progress_on_stderr
from flashsale.cli.parser import Subcommands, add_dry_run, add_json, command, subcommands
from kernel.settings import Settings


def _up(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.fleet import fleet

    with progress_on_stderr(args.json):
        if fleet.current_hosts(cfg):  # partly up, or all up: start only what is missing
            started = fleet.repair(cfg, args.gateways)
            done = f"fleet: started {', '.join(started) or 'nothing (all of it runs)'}"
        else:
            hosts = fleet.up(cfg, args.gateways)
            done = f"fleet: {len(hosts)} gateway hosts behind {fleet.balancer_url(cfg)}"
    if args.json:  # fleet status's rows; what was started is a note
        note(done)
        print_json(fleet.status(cfg))
        return 0
    print(done)
    _print_status(cfg)
    return 0


def _down(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.fleet import fleet, namespaces

    if args.dry_run:
        found, network = fleet.running(cfg), namespaces.leftovers(cfg)
        if args.json:  # {"stop": [{"name", "pid"}], "delete": [namespace, veth, bridge, table]}
            print_json({"stop": [{"name": n, "pid": p} for n, p in found], "delete": network})
        else:
            for name, pid in found:
                print(f"fleet: would stop {name} (pid {pid})")
            print(f"fleet: would delete {', '.join(network) or 'no network (none is left)'}")
        note("dry run: nothing stopped or deleted")
        return 0
    stopped = fleet.down(cfg)
    print(f"fleet: stopped {', '.join(stopped) or 'nothing'}; namespaces and veths deleted")
    return 0


def _status(args: argparse.Namespace, cfg: Settings) -> int:
    if args.json:
        from flashsale.fleet import fleet

        # A list, one object per row (the table's rows; docs/cli.md names the fields).
        print_json(fleet.status(cfg))
    else:
        _print_status(cfg)
    return 0


def _print_status(cfg: Settings) -> None:
    from flashsale.fleet import fleet

    for row in fleet.status(cfg):
        pid = row["pid"] or "-"
        ready = "ready" if row["ready"] else "not ready"
        balancer = f"  balancer:{row['balancer']}" if "balancer" in row else ""
        print(f"  {row['name']:<8} {row['address']:<36} pid {pid!s:<8} {ready}{balancer}")


def _gateways(text: str) -> int:
    count = int(text)
    if not 1 <= count <= 200:  # addresses .11 .. .210 of the fleet's /24
        raise argparse.ArgumentTypeError("between 1 and 200")
    return count


def add_fleet(sub: Subcommands) -> None:
    parser = command(sub, "fleet", "start, stop or show gateway hosts (namespaces) behind haproxy")
    actions = subcommands(parser, "action")
    up = command(actions, "up", "create the hosts, start a gateway in each, haproxy in front", _up)
    up.add_argument(
        "--gateways",
        type=_gateways,
        default=None,
        metavar="N",
        help="gateway hosts, one network namespace each (default: 2; a fleet partly up: what "
        "it has, and only its missing processes are started)",
    )
    add_json(up)  # fleet status's rows; what was started goes to stderr
    down = command(
        actions, "down", "stop exactly what `fleet up` started, delete its network", _down
    )
    add_dry_run(down, "the processes it would stop and the network it would delete")
    add_json(down)
    status = command(
        actions, "status", "show each host, the balancer and the sold-out agent", _status
    )
    add_json(status)
