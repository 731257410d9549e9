"""``python -m loadtest.bench``: measure the purchase path and the pipeline behind it side by side
with their baselines, and rewrite ``bench.md`` (raw: ``loadtest/reports/sections/<section>.json``,
one committed file a section; ``--render`` rewrites bench.md from them without measuring).

Sections (``--only`` runs a subset; the others keep their committed files) are the registry
in ``loadtest.bench.sections``; ``--help`` lists each one's options. ``--compare NAME=DIR|REV``
measures another code tree beside the current code in the sections that compare.
``python -m loadtest.capacity.plan`` sizes a fleet from the committed results.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from kernel.settings import settings
from loadtest.bench import machine, report
from loadtest.bench import results as store
from loadtest.bench.context import Context
from loadtest.bench.harness import Options
from loadtest.bench.sections import SECTIONS, add_flags, options_of
from loadtest.constants import REPORTS_DIR
from loadtest.generators import tokens
from loadtest.measure import trees


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", help=f"sections, comma separated: {','.join(SECTIONS)}")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="repeats of every run (default 3)")
    p.add_argument(
        "--quick", action="store_true", help="a smoke run: 3 s runs, 1 repeat, smaller sale"
    )
    p.add_argument("--soldout-connections", type=int, default=64)
    # 256: at 128 the gateway's core was 91-94% busy (its requests waited on Redis and Kafka
    # across the other core), so the rate measured round trips, not capacity; the naive
    # gateway is saturated at either.
    p.add_argument("--reserve-connections", type=int, default=256)
    p.add_argument("--open-connections", type=int, default=256)
    p.add_argument("--output", type=Path, default=report.BENCH_MD, help="the report to rewrite")
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: rewrite the report from the committed section files",
    )
    p.add_argument("--results", type=Path, default=store.SECTIONS_DIR, help=argparse.SUPPRESS)
    p.add_argument(
        "--compare",
        type=_tree,
        action="append",
        default=[],
        metavar="NAME=DIR|REV[,field=value]",
        help="a code tree measured beside the current code (repeatable; sections that compare)",
    )
    for spec in SECTIONS.values():
        add_flags(p, spec)
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.repeats = 3.0, 1
    args.sections = [s for s in (args.only or ",".join(SECTIONS)).split(",") if s]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if args.compare and (single := [s for s in args.sections if not SECTIONS[s].compares]):
        p.error(f"--compare: sections {', '.join(single)} measure the current code only")
    for name in args.sections:
        try:
            options_of(args, SECTIONS[name])
        except ValueError as exc:
            p.error(str(exc))
    return args


def _tree(text: str) -> trees.Wanted:
    try:
        return trees.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options(args: argparse.Namespace) -> Options:
    return Options(
        duration_s=args.duration,
        warmup_s=1.0 if args.quick else 2.0,
        soldout_connections=args.soldout_connections,
        reserve_connections=args.reserve_connections,
        open_connections=args.open_connections,
        open_warmup_s=1.0,
        redis_clients=50,
        redis_calls={1: int(10_000 * args.duration), 16: int(40_000 * args.duration)},
    )


def preflight(sections: Sequence[str]) -> None:
    wanted = {t for s in sections for t in SECTIONS[s].tools}
    missing = sorted(
        t for t in wanted if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()
    )
    if missing:
        raise SystemExit(
            f"missing tools: {', '.join(missing)} (install them with `scripts/bootstrap --bench`,"
            " which `make bench` runs)"
        )
    if machine.describe()["nproc"] < 2:
        raise SystemExit("needs 2 cores: the server on core 0, the load generator on core 1")


def _stop_on_sigterm() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> None:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    if args.render:
        report.write(store.load(args.results), PARTS, args.output)
        print(f"wrote {args.output} from {args.results}")
        return
    preflight(args.sections)
    _stop_on_sigterm()
    cfg = settings()
    tokens.check(cfg)
    command = shlex.join([".venv/bin/python", "-m", "loadtest.bench", *raw])
    log_dir = REPORTS_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="loadtest-"))
    results = store.load(args.results)
    ctx = Context(args, cfg, options(args), workdir, log_dir, results, args.compare)
    print(f"sections: {', '.join(args.sections)} (logs in {log_dir})", flush=True)
    try:
        for name in args.sections:
            rec = store.Recorder(name)
            begun = store.begin()
            try:
                spec = SECTIONS[name]
                about = spec.measure(ctx, options_of(args, spec), rec)
            except Exception as exc:  # noqa: BLE001 - one section failing leaves the others to run
                print(f"  ✗ {name} failed, its previous results kept: {exc}", flush=True)
                continue
            if rec.runs and all(r["problems"] and not r["metrics"] for r in rec.runs):
                print(f"  ✗ every run of {name} failed: its previous results kept", flush=True)
                continue
            data = store.section(command, begun, about, rec.runs)
            ctx.results["sections"][name] = data
            saved = store.save(name, data, args.results)
            report.write(ctx.results, PARTS, args.output)
            print(f"  → {saved} written; {args.output} rewritten", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: servers stopped; finished sections kept", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        ctx.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"wrote {args.output} and {args.results}/")


PARTS = [report.Part(s.name, s.title, s.render) for s in SECTIONS.values()]


if __name__ == "__main__":
    main()
