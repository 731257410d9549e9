"""What one load run aims at, decided once on the master (or the standalone process) at test
start and forwarded to every worker inside Locust's spawn message; and each process's share of
it: a disjoint range of buyer ids and a slice of the spike's crowd.

Buyer ids are ``id_base · 2^34 + worker_index · 2^26 + n``: ``id_base`` is a random 24-bit
number drawn per run, so runs do not meet, and the worker index keeps workers apart within a
run. 58 bits in all, within the gateway's 18-digit ``sub``; up to 256 workers of 67M buyers.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from kernel.settings import Settings
from loadtest.generators import tokens
from loadtest.scenarios.options import Options
from rig import admin

log = logging.getLogger(__name__)

RUN_KEY = "flashsale_run"  # the parsed_options attribute Locust forwards to workers
BASE_BITS, WORKER_BITS, SEQ_BITS = 24, 8, 26


@dataclass(frozen=True, slots=True)
class Run:
    item_id: int  # 0: no item (no purchase scenario selected, or creating it failed)
    voucher: str  # "": no voucher
    opens_at: float  # epoch seconds; buyers wait for it
    buyers: int  # FlashSaleSpike's crowd, over all workers
    workers: int
    id_base: int
    sale_id: int = 0  # the item's sale (0: not known; the waiting-room scenarios need it)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        return cls(**data)


def resolve(
    base_url: str | None,
    cfg: Settings,
    opts: Options,
    *,
    wants_item: bool,
    wants_voucher: bool,
    workers: int,
) -> Run:
    """The run's target: the given item and voucher, or fresh ones made through the admin API."""
    item_id, opens_at, voucher = opts.item_id, opts.opens_at, opts.voucher
    sale_id = opts.sale_id
    if wants_item and not item_id:
        if base_url is None:
            raise admin.AdminError("no --host: cannot create a sale")
        sale = admin.create_sale(
            base_url,
            cfg,
            units=opts.units,
            shards=opts.shards,
            opens_at=time.time() + opts.opens_in,
            waiting_room=opts.waiting_room,
        )
        item_id, opens_at, sale_id = sale.item_id, sale.opens_at, sale.sale_id
        log.info(
            "created sale %s: item %s, %s units over %s shards, opens in %.1fs",
            sale.sale_id,
            item_id,
            sale.units,
            sale.shards,
            opts.opens_in,
        )
    if wants_voucher and not voucher:
        if base_url is None:
            raise admin.AdminError("no --host: cannot create a voucher")
        code = f"LT{secrets.token_hex(6).upper()}"
        voucher = admin.create_flash_voucher(
            base_url, cfg, code=code, total_limit=opts.voucher_limit
        )
        log.info("created flash voucher %s: %s uses", voucher, opts.voucher_limit)
    return Run(
        item_id=item_id,
        sale_id=sale_id,
        voucher=voucher,
        opens_at=opens_at,
        buyers=opts.buyers,
        workers=max(1, workers),
        id_base=secrets.randbits(BASE_BITS),
    )


def crowd_share(buyers: int, workers: int, index: int) -> int:
    """Worker ``index``'s slice of the crowd: shares differ by at most one buyer."""
    return buyers // workers + (1 if index < buyers % workers else 0)


@dataclass(frozen=True, slots=True)
class Buyer:
    user_id: int
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class Process:
    """This process's part of the run: fresh buyers from its own id range, and its crowd slice."""

    def __init__(self, run: Run, worker_index: int, cfg: Settings) -> None:
        if not 0 <= worker_index < 2**WORKER_BITS:
            raise ValueError(f"worker index {worker_index} beyond {2**WORKER_BITS} workers")
        self.run = run
        self.cfg = cfg
        self.first_id = (run.id_base << (WORKER_BITS + SEQ_BITS)) | (worker_index << SEQ_BITS)
        self._seq = itertools.count()
        self.crowd_left = crowd_share(run.buyers, run.workers, worker_index)

    def new_user_id(self) -> int:
        n = next(self._seq)
        if n >= 2**SEQ_BITS:
            raise RuntimeError("this worker has used its whole buyer id range")
        return self.first_id + n

    def new_buyer(self) -> Buyer:
        user_id = self.new_user_id()
        return Buyer(user_id, next(tokens.signed(self.cfg, range(user_id, user_id + 1))).decode())

    def crowd_buyer(self) -> Buyer | None:
        """The next buyer of the spike's crowd, or None once this worker's slice is through."""
        if self.crowd_left <= 0:
            return None
        self.crowd_left -= 1
        return self.new_buyer()

    def wait_for_opening(self) -> None:
        delay = self.run.opens_at - time.time()
        if delay > 0:
            time.sleep(delay)  # gevent-patched: only this user waits


_current: Process | None = None


def begin(parsed_options: Any, worker_index: int, cfg: Settings) -> Process | None:
    """Take this process's share of the run Locust handed over (None when there is none)."""
    global _current
    data = getattr(parsed_options, RUN_KEY, None)
    _current = Process(Run.from_dict(data), worker_index, cfg) if data else None
    return _current


def current() -> Process | None:
    return _current
