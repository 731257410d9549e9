"""A stamped copy of the project: its gateway times each stage of a purchase, for the breakdown
of one 202 (the ``reserve_speed`` section's ``--reserve-speed-stamps``). Never run in production:
the stamps cost CPU of their own, so the copy is measured for *time* per stage only (CPU per
stage comes from py-spy on the unmodified code, ``--reserve-speed-profile``).

The copy's gateway writes ``<stamps dir>/stages-<pid>.json`` every 10,000 answers: each stage's
durations, which ``summary`` gives as count, mean, p50, p90 and p99 in ms. Each edit names the
line it goes next to; when the code has moved, the copy fails with the anchor that is gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from loadtest.measure import latency

STAMPS_DIR = Path("/tmp")  # noqa: S108 - a throw-away measurement's output

# The module the copy's gateway records into (kernel/stagetimes.py in the copy only).
_RECORDER = '''"""Stage durations of the stamped copy (loadtest/measure/stamps.py)."""
import json, os
_d = {}
_n = [0]
def add(name, seconds):
    values = _d.setdefault(name, [])
    if len(values) < 400000:
        values.append(seconds)
def tick():
    _n[0] += 1
    if _n[0] % 10000 == 0:
        with open(os.path.join(STAMPS_DIR, f"stages-{os.getpid()}.json"), "w") as f:
            json.dump(_d, f)
'''

_S = "from kernel import stagetimes as _st\n"
# (file, anchor, replacement): the anchor must occur exactly once.
EDITS: tuple[tuple[str, str, str], ...] = (
    ("gateway/purchase.py", "import time\n", "import time\n" + _S),
    (
        "gateway/purchase.py",
        '        user_id = self.s.verifier.user_id(header(scope, b"authorization"))\n',
        "        _t = time.perf_counter()\n"
        '        user_id = self.s.verifier.user_id(header(scope, b"authorization"))\n'
        '        _st.add("token verification", time.perf_counter() - _t)\n',
    ),
    (
        "gateway/purchase.py",
        "        order_id = new_order_id(item.id)\n",
        "        _t = time.perf_counter()\n"
        "        order_id = new_order_id(item.id)\n"
        '        _st.add("order id", time.perf_counter() - _t)\n',
    ),
    (
        "gateway/purchase.py",
        "                payload = encoded[shard] = encode(event)\n",
        "                _t = time.perf_counter()\n"
        "                payload = encoded[shard] = encode(event)\n"
        '                _st.add("event encoding", time.perf_counter() - _t)\n',
    ),
    (
        "gateway/purchase.py",
        "        try:\n            reservation = await self.s.router.reserve(",
        "        _tr = time.perf_counter()\n"
        "        try:\n            reservation = await self.s.router.reserve(",
    ),
    (
        "gateway/purchase.py",
        '        failpoint("gateway.after_reserve")\n',
        '        _st.add("redis reserve (awaited)", time.perf_counter() - _tr)\n'
        "        _tk = time.perf_counter()\n"
        '        failpoint("gateway.after_reserve")\n',
    ),
    (
        "gateway/purchase.py",
        "        metrics.RESERVATION_SECONDS.observe(",
        '        _st.add("kafka hand-off (awaited)", time.perf_counter() - _tk)\n'
        "        _st.tick()\n"
        "        metrics.RESERVATION_SECONDS.observe(",
    ),
    (
        "gateway/front.py",
        "            if not self.admission.admit():\n",
        "            from kernel import stagetimes as _st\n"
        '            _st.add("loop turn age at arrival", time.monotonic()'
        " - self.admission.turn_started)\n"
        "            if not self.admission.admit():\n",
    ),
    (
        "gateway/front.py",
        "from __future__ import annotations\n",
        "from __future__ import annotations\nimport time\n",
    ),
    ("shard_router/autopipeline.py", "import time\n", "import time\n" + _S),
    (
        "shard_router/autopipeline.py",
        "        self._queued[node].append((script, keys, args, future))\n",
        "        future._q = time.perf_counter()  # type: ignore[attr-defined]\n"
        "        self._queued[node].append((script, keys, args, future))\n",
    ),
    (
        "shard_router/autopipeline.py",
        "        queued, self._queued = self._queued, defaultdict(list)\n",
        "        queued, self._queued = self._queued, defaultdict(list)\n"
        "        _now = time.perf_counter()\n"
        "        for _calls in queued.values():\n"
        "            for _c in _calls:\n"
        "                _c[3]._f = _now\n"
        '                _st.add("redis: queued until the flush", _now - _c[3]._q)\n',
    ),
    (
        "shard_router/autopipeline.py",
        "        batch.timer = asyncio.get_running_loop().call_at(deadline, self._expire, batch)\n",
        "        batch.timer = asyncio.get_running_loop().call_at(deadline, self._expire, batch)\n"
        "        batch.t_sent = time.perf_counter()\n"
        '        _st.add("redis: calls per batch (count, not ms)", len(calls) / 1000)\n'
        "        for _c in calls:\n"
        '            if hasattr(_c[3], "_f"):\n'
        '                _st.add("redis: held, a WAIT in flight", batch.t_sent - _c[3]._f)\n',
    ),
    (
        "shard_router/autopipeline.py",
        "        node = batch.node\n        replies = ",
        "        _now = time.perf_counter()\n"
        "        if batch.waits:\n"
        '            _st.add("redis: sent -> script replies", batch.t_scripts - batch.t_sent)\n'
        '            _st.add("redis: script replies -> WAIT reply", _now - batch.t_scripts)\n'
        "        else:\n"
        '            _st.add("redis: sent -> replies (no WAIT)", _now - batch.t_sent)\n'
        "        node = batch.node\n        replies = ",
    ),
    (
        "shard_router/node_link.py",
        '        "hops",\n    )',
        '        "hops",\n        "t_sent",\n        "t_scripts",\n    )',
    ),
    (
        "shard_router/node_link.py",
        "            batch.replies.append(reply)\n",
        "            batch.replies.append(reply)\n"
        "            if len(batch.replies) == batch.expected - 1:\n"
        "                import time as _time\n"
        "                batch.t_scripts = _time.perf_counter()\n",
    ),
    ("gateway/producer.py", "import threading\n", "import threading\nimport time\n" + _S),
    (
        "gateway/producer.py",
        "        sent = _Send(loop.create_future(), topic, partition, key, value,"
        " now + self.timeout_s + 0.5)\n",
        "        sent = _Send(loop.create_future(), topic, partition, key, value,"
        " now + self.timeout_s + 0.5)\n"
        "        sent.future._p = time.perf_counter()  # type: ignore[attr-defined]\n",
    ),
    (
        "gateway/producer.py",
        "        if threading.get_ident() == self._loop_thread:\n",
        '        _st.add("kafka: produce -> report served", time.perf_counter() - sent.future._p)\n'
        "        if threading.get_ident() == self._loop_thread:\n",
    ),
    (
        "gateway/producer.py",
        "        self._producer.poll(0)  # runs the delivery callbacks, on this thread\n",
        "        _t = time.perf_counter()\n"
        "        self._producer.poll(0)  # runs the delivery callbacks, on this thread\n"
        '        _st.add("kafka: one poll(0) call", time.perf_counter() - _t)\n',
    ),
)


def stamp(src: Path, dst: Path, stamps_dir: Path = STAMPS_DIR) -> Path:
    """Copy the project at ``src`` to ``dst`` (code only) and insert the stamps."""
    ignore = shutil.ignore_patterns(".venv", ".stack*", ".git", "reports", "__pycache__", ".*cache")
    shutil.copytree(src, dst, ignore=ignore, dirs_exist_ok=False)
    (dst / "kernel" / "stagetimes.py").write_text(
        _RECORDER.replace("STAMPS_DIR", repr(str(stamps_dir)))
    )
    for name, anchor, replacement in EDITS:
        path = dst / name
        text = path.read_text()
        if text.count(anchor) != 1:
            raise RuntimeError(
                f"{name}: the anchor moved, update loadtest/measure/stamps.py:\n{anchor}"
            )
        path.write_text(text.replace(anchor, replacement))
    return dst


def summary(raw: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """A stamped gateway's ``stages-<pid>.json`` as count, mean and percentiles (ms) per stage."""
    out: dict[str, dict[str, float]] = {}
    for stage, values in raw.items():
        if not values:
            continue
        found = latency.of_seconds(values)
        out[stage] = {
            "n": len(values),
            "mean_ms": sum(values) / len(values) * 1000,
            **{f"p{p}_ms": found.ms(p) for p in (50, 90, 99)},
        }
    return out
