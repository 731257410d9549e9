"""``flashsale stack up|down|status`` and ``flashsale migrate``: the local stack and its schema."""

from __future__ import annotations

import argparse

from flashsale.cli.errors import UsageError
from flashsale.cli.output import note, print_json, progress_on_stderr
from flashsale.cli.parser import Subcommands, add_dry_run, add_json, command, subcommands
from kernel.settings import Settings


def _up(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale import stack
    from flashsale.migrate import migrate

    with progress_on_stderr(args.json):
        took = stack.up(cfg)
        applied = migrate(cfg)
    if args.json:  # stack status's shape, and what this up took and applied
        print_json({**_status_view(cfg), "tookSeconds": round(took, 1), "migrations": applied})
        return 0
    print(f"stack: up in {took:.1f}s; migrations applied: {', '.join(applied) or 'none pending'}")
    _print_status(cfg)
    return 0


def _down(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale import stack

    if args.dry_run:
        found = stack.running(cfg)
        if args.json:  # {"stop": [{"part", "process", "pid"}, ...]}, in the order of stopping
            print_json({"stop": [{"part": a, "process": b, "pid": c} for a, b, c in found]})
        else:
            for part, process, pid in found:
                print(f"stack: would stop {part}: {process} (pid {pid})")
        note(f"dry run: nothing stopped ({len(found)} process(es) run)")
        return 0
    stack.down(cfg)
    return 0


def _status(args: argparse.Namespace, cfg: Settings) -> int:
    if args.json:
        print_json(_status_view(cfg))
    else:
        _print_status(cfg)
    return 0


def _status_view(cfg: Settings) -> dict[str, object]:
    """{"parts": {name: state line}, "logDir": path}: one line per part, as the table has."""
    from flashsale import stack

    return {"parts": stack.status(cfg), "logDir": str(cfg.log_dir)}


def _print_status(cfg: Settings) -> None:
    from flashsale import stack

    for name, state in stack.status(cfg).items():
        print(f"  {name:<10} {state}")
    print(f"  logs       {cfg.log_dir}/")


def _cpu(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale import stack
    from flashsale.stack import cpu

    if args.seconds <= 0:
        raise UsageError(f"SECONDS must be above 0, not {args.seconds:g}")
    usage = cpu.measure(stack.named_pids(cfg), args.seconds)
    ours = sum(usage.cores.values())
    if args.json:
        # {"seconds", "groups": {name: {"cores", "processes"}}, "total", "machine"}: cores used
        # on average over the window; machine: every process's and the kernel's.
        groups = {
            g: {"cores": round(c, 4), "processes": usage.processes[g]}
            for g, c in usage.cores.items()
        }
        print_json(
            {
                "seconds": round(usage.seconds, 2),
                "groups": groups,
                "total": round(ours, 4),
                "machine": round(usage.machine_cores, 4),
            }
        )
        return 0
    print(f"  CPU over {usage.seconds:.1f} s, cores on average:")
    for group, cores in usage.cores.items():
        print(f"  {group:<22} {cores:6.3f}  ({usage.processes[group]} processes)")
    print(f"  {'stack and project':<22} {ours:6.3f}")
    print(f"  {'the whole machine':<22} {usage.machine_cores:6.3f}")
    return 0


def _migrate(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.migrate import migrate, pending

    ids = pending(cfg) if args.dry_run else migrate(cfg)
    if args.json:  # {"migrations": [id, ...], "applied": false on a dry run}
        print_json({"migrations": ids, "applied": not args.dry_run})
    elif args.dry_run:
        print(f"migrations pending: {', '.join(ids) or 'none'}")
    else:
        print(f"migrations applied: {', '.join(ids) or 'none pending'}")
    if args.dry_run:
        note("dry run: no migration applied")
    return 0


def add_stack(sub: Subcommands) -> None:
    parser = command(
        sub, "stack", "start, stop or show the local Redis/Kafka/PostgreSQL/Prometheus stack"
    )
    actions = subcommands(parser, "action")
    up = command(actions, "up", "start what is not running, wait until healthy, migrate", _up)
    add_json(up)  # stack status's shape; the progress lines go to stderr
    down = command(actions, "down", "stop exactly what `stack up` started (by PID file)", _down)
    add_dry_run(down, "the processes it would stop")
    add_json(down)
    add_json(command(actions, "status", "show what runs where", _status))
    cpu = command(
        actions,
        "cpu",
        "measure the CPU the stack's processes and the project's (gateways, writers, jobs) use,"
        " by group, over a few seconds",
        _cpu,
    )
    cpu.add_argument("seconds", nargs="?", type=float, default=10.0, help="window (default 10)")
    add_json(cpu)


def add_migrate(sub: Subcommands) -> None:
    p = command(sub, "migrate", "apply pending database migrations (migrations/*.sql)", _migrate)
    add_dry_run(p, "the migrations that would be applied")
    add_json(p)
