"""vegeta (github.com/tsenart/vegeta, built from the Go module proxy) as an open-loop instrument
independent of the project's own generator: targets files, one attack pinned to a core, and its
results read back as hits.

An attack's results go to a file and are encoded to CSV only after it ends, so decoding never
competes with the attack for the load core. Each hit keeps vegeta's sequence number: with a
constant rate, a request was due at ``start + seq / rate``, which gives latencies from the
intended send time (no coordinated omission), as loadtest/generators/openloop.py measures.
"""

from __future__ import annotations

import csv
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.measure.child import pinned
from loadtest.measure.latency import Latencies


@dataclass(frozen=True, slots=True)
class Hit:
    seq: int
    sent_ns: int  # when vegeta sent it (its timestamp)
    latency_ns: int
    code: int  # 0: no answer (timeout, reset)


def targets(path: Path, url: str, token_lines: Iterable[bytes]) -> Path:
    """A vegeta ``http`` targets file: one POST per token (a fresh buyer each), in order."""
    with path.open("wb") as out:
        for token in token_lines:
            out.write(b"POST " + url.encode() + b"\nAuthorization: Bearer " + token + b"\n\n")
    return path


def start(
    binary: str,
    url: str,
    *,
    rate: float,
    seconds: float,
    core: int | str,
    connections: int,
    results: Path,
    target_file: Path | None = None,
    timeout_s: float = 30.0,
) -> subprocess.Popen[bytes]:
    """Start one constant-rate attack (``rate`` rounded: vegeta takes whole requests a second)
    pinned to ``core``, its results to ``results``: at most
    ``connections`` connections and as many workers (beyond them vegeta falls behind its
    schedule, which the due times show). No targets file: ``POST url`` every time."""
    argv = [
        binary, "attack", "-rate", f"{round(rate)}/s", "-duration", f"{seconds:g}s",
        "-max-connections", str(connections), "-max-workers", str(connections),
        "-timeout", f"{timeout_s:g}s", "-output", str(results),
    ]  # fmt: skip
    if target_file is not None:
        argv += ["-lazy", "-targets", str(target_file)]
    proc = subprocess.Popen(pinned(core, argv), stdin=subprocess.PIPE)  # noqa: S603 - our argv
    assert proc.stdin is not None
    if target_file is None:
        proc.stdin.write(f"POST {url}\n".encode())
    proc.stdin.close()
    return proc


def finish(
    binary: str, proc: subprocess.Popen[bytes], results: Path, timeout_s: float
) -> list[Hit]:
    """Wait for an attack, then decode its results (after it: never beside the load)."""
    if proc.wait(timeout_s) != 0:
        raise RuntimeError(f"vegeta attack exited {proc.returncode}")
    encoded = results.with_suffix(".csv")
    with encoded.open("wb") as out:
        subprocess.run(  # noqa: S603 - our argv
            [binary, "encode", "--to", "csv", str(results)], stdout=out, check=True, timeout=600
        )
    hits = list(read_csv(encoded))
    results.unlink()
    encoded.unlink()
    return hits


def read_csv(path: Path) -> Iterator[Hit]:
    """vegeta's CSV columns: timestamp, code, latency, bytes out, bytes in, error, body,
    attack, seq, …"""
    with path.open(newline="") as rows:
        for r in csv.reader(rows):
            if r:
                yield Hit(int(r[8]), int(r[0]), int(r[2]), int(r[1]))


def start_ns(hits: list[Hit], rate: float) -> float:
    """When the attack's schedule began: the earliest ``sent - seq / rate`` among its first
    requests (those vegeta sent before it could fall behind)."""
    return min(h.sent_ns - h.seq * 1e9 / rate for h in hits if h.seq < 50)


def summary(hits: list[Hit], rate: float, skip: int) -> dict[str, Any]:
    """Latency figures, ms: ``sent`` as vegeta measures, from when it sent; ``intended`` from
    each request's due time. Requests with ``seq < skip`` are the warm-up."""
    if not hits:
        raise ValueError("vegeta recorded no requests")
    start = start_ns(hits, rate)
    codes: Counter[str] = Counter()
    sent, intended, lag = Latencies(), Latencies(), Latencies()
    last_done = 0.0
    for hit in hits:
        last_done = max(last_done, hit.sent_ns + hit.latency_ns)
        if hit.seq < skip:
            continue
        codes[str(hit.code)] += 1
        due = start + hit.seq * 1e9 / rate
        sent.add_ms(hit.latency_ns / 1e6)
        intended.add_ms((hit.sent_ns + hit.latency_ns - due) / 1e6)
        lag.add_ms((hit.sent_ns - due) / 1e6)
    out: dict[str, Any] = {"requests": sent.count, "statuses": dict(codes)}
    for label, values in (("sent", sent), ("intended", intended)):
        out.update(values.figures(f"_{label}", (50, 99, 99.9)))
    out["send_lag_p99_ms"] = lag.ms(99)
    out["elapsed_s"] = (last_done - start) / 1e9
    out["throughput_rps"] = len(hits) / out["elapsed_s"]
    return out
