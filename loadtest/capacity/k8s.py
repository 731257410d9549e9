"""Kubernetes manifests for the planner's fleet, as YAML files in a directory:
``python -m loadtest.capacity.plan ... --emit k8s DIR`` renders them from the fleet it answers,
with the sizing they came from in ``DIR/sizing.json``; ``python -m loadtest.capacity.k8s DIR``
renders ``DIR`` again from that file (deploy/k8s/ is kept so, and a test checks it is current).
The objects are loadtest/capacity/manifests.py's; ``kubectl apply -k DIR`` applies them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from loadtest.capacity import edge, manifests, policies
from loadtest.capacity.manifests import Sizing, aligned_writers
from loadtest.capacity.model import Figures, Fleet, Target, cost_us
from loadtest.capacity.pods import Doc

SIZING = "sizing.json"


class _Dumper(yaml.SafeDumper):
    """No &anchors for objects the builders share: each manifest reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """A file's text (haproxy.cfg, the Lua) as a literal block, readable as the file is."""
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _text)


# A file whose builder returns nothing (monitoring, unless asked for) is not written.
FILES: dict[str, Callable[[Sizing], list[Doc]]] = {
    "namespace.yaml": lambda s: [policies.namespace(s)],
    "config.yaml": lambda s: [manifests.config_map(s)],
    "balancer.yaml": edge.balancer,
    "gateway.yaml": manifests.gateway,
    "gateway-prescale.yaml": manifests.scaler,
    "writer.yaml": manifests.writer,
    "jobs.yaml": manifests.jobs,
    "network.yaml": policies.network_policies,
    "monitoring.yaml": lambda s: policies.monitoring(s) if s.monitoring else [],
}


def sizing(
    fleet: Fleet, target: Target, figures: Figures, orders_partitions: int, **choices: Any
) -> Sizing:
    """The manifests' inputs from the planner's answer; ``choices`` are Sizing's own fields
    (image, addresses, sale times)."""
    reserve = cost_us(figures.reserve_us, figures.reserve_us_at, fleet.utilisation)[0]
    if fleet.tier is not None:
        # The balancers answer sold out: the gateways behind them see the reserve share only.
        t, forwarded = fleet.tier, 1 - target.sold_out_share
        processes = t.gateway_processes
        per_request = cost_us(figures.reserve_us, figures.reserve_us_at, t.gateway_utilisation)[0]
        tier = f"; behind {t.balancer_cores} balancer cores answering sold out"
    else:
        forwarded, processes, tier = 1.0, fleet.gateway_processes, ""
        soldout = cost_us(figures.soldout_us, figures.soldout_us_at, fleet.utilisation)[0]
        per_request = target.sold_out_share * soldout + (1 - target.sold_out_share) * reserve
    # The busy share of each pod's core at the planned load (processes are whole, so at most
    # the planner's utilisation): the autoscaler's target.
    busy = target.rps * forwarded * per_request / 1e6 / processes
    partitions = max(orders_partitions, fleet.kafka_partitions)
    return Sizing(
        gateway_replicas=processes,
        utilisation=round(busy, 3),
        headroom=target.headroom,
        cpu_us_per_request=round(per_request, 2),
        rps=target.rps,
        writers=aligned_writers(fleet.writers, partitions),
        orders_partitions=partitions,
        source=(
            f"{target.rps:,.0f} req/s, {target.sold_out_share:.0%} sold-out, {target.stock:,} units"
            f" x {target.items} item(s), p99 <= {target.p99_ms:g} ms: {processes} gateways at"
            f" {busy:.0%}{tier} ({figures.soldout_us.source}; {figures.reserve_us.source})"
        ),
        forwarded_share=round(forwarded, 6),
        balancer_cores=0 if fleet.tier is None else fleet.tier.balancer_cores,
        **choices,
    )


def _header(s: Sizing) -> str:
    sized = textwrap.wrap(f"Sized for {s.source}.", 98)
    return (
        "# Rendered from sizing.json by `python -m loadtest.capacity.k8s DIR` (or the planner's\n"
        "# --emit k8s DIR): change that file and render again, not this one.\n"
        + "".join(f"# {line}\n" for line in sized)
    )


def render(s: Sizing) -> dict[str, str]:
    """File name -> its text: every manifest file, the kustomization and sizing.json."""
    built = {name: build(s) for name, build in FILES.items()}
    files = {
        name: _header(s)
        + "---\n".join(
            yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
            for doc in docs
        )
        for name, docs in built.items()
        if docs
    }
    files["kustomization.yaml"] = yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": s.namespace,
            "resources": list(files),
        },
        sort_keys=False,
    )
    files[SIZING] = json.dumps(dataclasses.asdict(s), indent=2) + "\n"
    return files


def write(s: Sizing, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    rendered = render(s)
    for name in set(FILES) - set(rendered):  # e.g. monitoring.yaml, now turned off
        (directory / name).unlink(missing_ok=True)
    written = []
    for name, text in rendered.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def load(directory: Path) -> Sizing:
    return Sizing(**json.loads((directory / SIZING).read_text()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.capacity.k8s", description=__doc__)
    parser.add_argument("directory", type=Path, help=f"a directory with a {SIZING}")
    args = parser.parse_args(argv)
    for path in write(load(args.directory), args.directory):
        print(path)


if __name__ == "__main__":
    main()
