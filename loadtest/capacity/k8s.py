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

from loadtest.capacity import manifests
from loadtest.capacity.manifests import Doc, Sizing, aligned_writers
from loadtest.capacity.model import Figures, Fleet, Target, cost_us

SIZING = "sizing.json"


class _Dumper(yaml.SafeDumper):
    """No &anchors for objects the builders share: each manifest reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


FILES: dict[str, Callable[[Sizing], list[Doc]]] = {
    "config.yaml": lambda s: [manifests.config_map(s)],
    "gateway.yaml": manifests.gateway,
    "gateway-prescale.yaml": manifests.scaler,
    "writer.yaml": manifests.writer,
    "jobs.yaml": manifests.jobs,
}


def sizing(
    fleet: Fleet, target: Target, figures: Figures, orders_partitions: int, **choices: Any
) -> Sizing:
    """The manifests' inputs from the planner's answer; ``choices`` are Sizing's own fields
    (image, addresses, sale times)."""
    u = fleet.utilisation
    per_request = target.sold_out_share * cost_us(figures.soldout_us, figures.soldout_us_at, u)[0]
    per_request += (1 - target.sold_out_share) * cost_us(
        figures.reserve_us, figures.reserve_us_at, u
    )[0]
    partitions = max(orders_partitions, fleet.kafka_partitions)
    return Sizing(
        gateway_replicas=fleet.gateway_processes,
        utilisation=u,
        headroom=target.headroom,
        cpu_us_per_request=per_request,
        rps=target.rps,
        writers=aligned_writers(fleet.writers, partitions),
        orders_partitions=partitions,
        source=(
            f"{target.rps:,.0f} req/s, {target.sold_out_share:.0%} sold-out, {target.stock:,} units"
            f" x {target.items} item(s), p99 <= {target.p99_ms:g} ms: {fleet.gateway_processes}"
            f" gateways at {u:.0%} ({figures.soldout_us.source}; {figures.reserve_us.source})"
        ),
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
    files = {
        name: _header(s)
        + "---\n".join(
            yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100) for doc in build(s)
        )
        for name, build in FILES.items()
    }
    files["kustomization.yaml"] = yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": list(FILES),
        },
        sort_keys=False,
    )
    files[SIZING] = json.dumps(dataclasses.asdict(s), indent=2) + "\n"
    return files


def write(s: Sizing, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render(s).items():
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
