"""Which sales have a waiting room, and how far each one's admission frontier has come.

Every gateway ticks each open room: one script advances the frontier at the sale's rate (the
same on every gateway: Redis's clock) while units are left, and the new value is published, so
a poll reads a local dict — never Redis. A gateway's own tick also tells it the value, so one
that missed a broadcast, or just started, catches up within a tick. When the sale's last unit
is held the tick raises its items' sold-out flags (and broadcasts them): every waiter's next
poll answers 410; a restock clears them and the frontier moves on, in queue order.

A room's controls (paused, rate: controls.py) live in the room's meta hash, which the tick's
script reads: a change applied there binds every gateway's next tick. Each tick also carries
the record's controls as this gateway last read them, so a change that reached PostgreSQL but
not Redis is applied within a refresh (``item_cache_seconds``) and a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import asyncpg

from gateway.services import Services
from gateway.soldout import follow
from gateway.waiting_room import queue
from gateway.waiting_room.tickets import Signer
from shard_router import ShardUnavailable
from shard_router.redis_clock import RedisClock
from shard_router.stock_events import publish, publish_message

log = logging.getLogger(__name__)
CHANNEL = "flashsale:waiting-room"
_QUIET_CHECK_S = 1.0  # a sold-out or idle room asks Redis this often
_CLOCK_READ_S = 5.0  # Redis's clock is read this often (every tick until a read is good)
_ROOMS = """
select s.id, extract(epoch from s.starts_at)::float8 as starts_at,
       extract(epoch from s.ends_at)::float8 as ends_at, s.admission_rate_per_second as rate,
       s.room_version, s.room_paused, s.pow_difficulty, array_agg(i.id order by i.id) as items
from flash_sale s join flash_sale_item i on i.sale_id = s.id
where s.waiting_room and s.armed_at is not null and s.ends_at > now() - interval '1 hour'
group by s.id
"""


@dataclass(frozen=True, slots=True)
class Room:
    sale: int
    starts_at: float
    ends_at: float
    controls: queue.Controls  # as PostgreSQL held them at the last refresh
    pow_difficulty: int
    items: tuple[int, ...]


class WaitingRooms:
    def __init__(self, services: Services, signer: Signer) -> None:
        self.s = services
        self.signer = signer
        cfg = services.cfg
        self.tick_s = cfg.waiting_room_tick_ms / 1000
        self._default_rate = cfg.waiting_room_rate_per_s
        self.rooms: dict[int, Room] = {}  # mutated in place, never replaced (purchase.py)
        # An admission's expiry is written by the gateway that answered the poll and judged by
        # the one the purchase reaches: both by Redis's clock, whatever their own clocks say.
        self.clock = RedisClock()
        self.frontier: dict[int, int] = {}  # sale → places 1..n admitted
        self.spent: dict[int, int] = {}  # sale → places 1..n can no longer buy (purchase.py)
        self.live: dict[int, queue.Controls] = {}  # sale → as Redis applied them, last tick
        self._placed: set[int] = set()  # sales whose early arrivals have their places
        self._placing = asyncio.Lock()
        self._checked: dict[int, float] = {}  # sale → monotonic time of its last Redis tick
        self._idle: set[int] = set()  # rooms whose every joined place is admitted
        self._asked_at = 0.0  # monotonic; the routes' on-demand refresh
        self._refreshing: asyncio.Future[None] | None = None

    def controls(self, room: Room) -> queue.Controls:
        """What this gateway's polls answer by: Redis's as of this gateway's last tick (the
        record's before the first)."""
        return self.live.get(room.sale, room.controls)

    def sold_out(self, room: Room) -> bool:
        flags = self.s.flags
        return all(flags.is_sold_out(item) for item in room.items)

    async def refresh(self) -> None:
        """Re-read the armed sales with a room (an admin arm calls this too)."""
        fresh = {}
        for r in await self.s.pool.fetch(_ROOMS):
            controls = queue.Controls(
                r["room_version"], r["room_paused"], r["rate"] or self._default_rate
            )
            fresh[r["id"]] = Room(
                r["id"],
                r["starts_at"],
                r["ends_at"],
                controls,
                r["pow_difficulty"],
                tuple(r["items"]),
            )
        for sale in set(self.rooms) - set(fresh):
            del self.rooms[sale]
        self.rooms.update(fresh)

    async def refresh_soon(self, every_s: float) -> None:
        """An unknown sale asked for: one refresh at a time, at most one per ``every_s``, and
        every caller waits for the next one (so a just-armed sale is found within it)."""
        if self._refreshing is None or self._refreshing.done():
            wait = max(0.0, self._asked_at + every_s - time.monotonic())
            self._refreshing = asyncio.ensure_future(self._refresh_after(wait))
        await asyncio.shield(self._refreshing)

    async def _refresh_after(self, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        self._asked_at = time.monotonic()
        await self.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        refreshed = clock_read = 0.0
        while not stop.is_set():
            try:
                if not self.clock.known or time.monotonic() - clock_read >= _CLOCK_READ_S:
                    clock_read = time.monotonic()
                    await self.clock.read(self.s.router.client)
                if time.monotonic() - refreshed >= self.s.cfg.item_cache_seconds:
                    await self.refresh()
                    refreshed = time.monotonic()
                # Side by side: one slow room never delays another's sell-out.
                await asyncio.gather(*(self._tick(room) for room in list(self.rooms.values())))
            except (asyncpg.PostgresError, OSError, ShardUnavailable) as exc:
                log.warning("waiting-room tick: %s", exc)
            except Exception:
                log.exception("waiting-room tick")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.tick_s)

    async def _tick(self, room: Room) -> None:
        now = self.clock.now()
        if not room.starts_at <= now < room.ends_at:
            return
        sale = room.sale
        settled = self.sold_out(room) and self.spent.get(sale, 0) >= self.frontier.get(sale, 0) > 0
        if (settled or sale in self._idle) and time.monotonic() - self._checked.get(
            sale, 0.0
        ) < _QUIET_CHECK_S:
            # Sold out and settled, or nobody waiting: nothing moves, so Redis is asked once
            # a second (every gateway ticks every room). A sold-out room's flags are held up
            # here without I/O; a restock broadcast clears them and the room ticks at once.
            if settled:
                for item_id in room.items:
                    self.s.flags.mark(item_id)
            return
        self._checked[sale] = time.monotonic()
        client = self.s.router.client
        await self.ensure_placed(room, now)
        left = await self._units_left(room)
        if left == 0:
            await self._raise_flags(room)
        window = self.s.cfg.waiting_room_admission_s
        done = await queue.advance(client, sale, room.controls, room.ends_at, left, window)
        frontier, spent, joined = done.frontier, done.spent, done.joined
        self.live[sale] = done.controls
        if 0 <= joined <= frontier:
            self._idle.add(sale)  # every place given is admitted: a new joiner waits <= 1 s
        else:
            self._idle.discard(sale)
        if self.heard(room.sale, frontier, spent):
            await publish_frontier(self.s, room.sale, frontier, spent)

    def joined(self, sale: int) -> None:
        """Someone joined through this gateway: tick the room at once, idle or not."""
        self._idle.discard(sale)

    async def ensure_placed(self, room: Room, now: float) -> None:
        """After the start, before anything else: the early arrivals get their places, so a
        join that comes now is placed behind them (a no-op once done, remembered here). ``now``
        (this gateway's clock) only says when to ask: Redis's clock decides the start."""
        if room.sale in self._placed or now < room.starts_at:
            return
        async with self._placing:  # a burst of joins at the start: one of them places
            if room.sale not in self._placed:
                starts_at_ms = int(room.starts_at * 1000)
                if await queue.fix_places(self.s.router.client, room.sale, starts_at_ms):
                    self._placed.add(room.sale)

    async def _units_left(self, room: Room) -> int | None:
        """Over every item of the sale; None when unknown (a shard down or not loaded)."""
        catalog, router = self.s.catalog, self.s.router
        total = 0
        for item_id in room.items:
            item = catalog.cached(item_id) or await catalog.get(item_id)
            if item is None:
                return None
            try:
                total += await router.units_left(item.id, item.shards)
            except ShardUnavailable:
                return None
        return total

    async def _raise_flags(self, room: Room) -> None:
        """Every tick while nothing is left: the flags stay up here (a flag lapsing between
        two keep_fresh rounds would let a poll answer WAITING), broadcast when newly raised."""
        for item_id in room.items:
            raised = not self.s.flags.is_sold_out(item_id)
            self.s.flags.mark(item_id)
            if raised:
                await publish(self.s.router.client, "soldout", item_id)

    def heard(self, sale: int, frontier: int, spent: int) -> bool:
        """Apply a tick's or a broadcast's values; a late, older one never moves them back.
        → whether anything moved."""
        moved = False
        if frontier > self.frontier.get(sale, 0):
            self.frontier[sale], moved = frontier, True
        if spent > self.spent.get(sale, 0):
            self.spent[sale], moved = spent, True
        return moved


async def publish_frontier(s: Services, sale: int, frontier: int, spent: int) -> None:
    # Best effort: every gateway's own tick catches up.
    await publish_message(s.router.client, CHANNEL, f"{sale}:{frontier}:{spent}")


async def listen(rooms: WaitingRooms, nodes: tuple[str, ...], stop: asyncio.Event) -> None:
    """Apply frontier broadcasts, as gateway/soldout.py's listener does the flags'."""

    def apply(data: bytes) -> None:
        sale, frontier, spent = data.decode().split(":")
        rooms.heard(int(sale), int(frontier), int(spent))

    await follow(CHANNEL, nodes, stop, apply, "waiting-room")
