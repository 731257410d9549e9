"""What every section's measurement gets: the command line, the settings, the harness's options,
a scratch directory, the log directory and the committed results (a section may read another's,
as ``open`` reads ``closed``'s maxima); and how a section declares its options."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel.settings import Settings
from loadtest.bench import results as store
from loadtest.bench.harness import Harness, Options
from loadtest.measure import trees


def option(default: Any, text: str) -> Any:
    """A field of a section's options: its default, and its line in ``--help``."""
    return field(default=default, metadata={"help": text})


def floats(text: str) -> list[float]:
    """A comma-separated option's numbers."""
    return [float(x) for x in text.split(",") if x]


@dataclass
class Context:
    args: argparse.Namespace
    cfg: Settings
    opts: Options
    workdir: Path
    log_dir: Path
    results: store.Results
    # Code trees to measure beside the current code (``--compare NAME=DIR|REV``).
    compare: list[trees.Wanted] = field(default_factory=list)
    _harness: Harness | None = field(default=None)

    def harness(self, with_sale: bool = True) -> Harness:
        """The HTTP sections' harness, made on first use, and its sale, made on first need (a
        failed set-up raises, and is tried again by the next section that needs it)."""
        if self._harness is None:
            self._harness = Harness(self.cfg, self.opts, self.workdir, self.log_dir)
        h = self._harness
        if with_sale and h.bench_sale is None:
            print(f"set-up: sale through a gateway on :{h.ports['gateway']}", flush=True)
            made = h.set_up_sale()
            print(f"  sale {made.sale_id}, items {[i.item_id for i in made.items]}", flush=True)
        return h

    def own_harness(self, name: str, **options: Any) -> Harness:
        """A harness of a section's own (its own sale, scratch directory ``name``): the
        command line's options with ``options`` on top."""
        workdir = self.workdir / name
        workdir.mkdir(exist_ok=True)
        return Harness(self.cfg, dataclasses.replace(self.opts, **options), workdir, self.log_dir)

    def close(self) -> None:
        if self._harness is not None:
            self._harness.close()
