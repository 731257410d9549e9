"""What ``--json`` prints: one Struct per shape, field names as the HTTP API spells them
(camelCase), moments as RFC 3339 in UTC. docs/cli.md documents these shapes; a field is added,
never renamed or removed, so scripts keep working. Where the API answers the same question
(create, arm, item), the shape is the API's answer."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from typing import TYPE_CHECKING, Any, cast

import msgspec

if TYPE_CHECKING:  # only the constructors name them; importing them costs Redis and Kafka clients
    from domain.arm import ArmedItem
    from domain.sales import NewSale
    from domain.voucher_arm import ArmedVoucher
    from domain.vouchers import Voucher
    from flashsale.observe.fairness import Fairness
    from flashsale.observe.figures import Figures
    from flashsale.observe.state import SaleView
    from flashsale.observe.timeline import Timeline
    from jobs.audit import HoldAudit
    from jobs.expiry import Due
    from shard_router import ShardState


class View(msgspec.Struct, frozen=True, rename="camel"):
    pass


# sale create (= POST /admin/sales's 201 body)
class CreatedItem(View, frozen=True):
    item_id: int
    product_id: str
    quantity: int
    shards: int


class CreatedSale(View, frozen=True):
    sale_id: int
    items: list[CreatedItem]

    @classmethod
    def of(cls, sale_id: int, item_ids: list[int], sale: NewSale) -> CreatedSale:
        return cls(
            sale_id,
            [
                CreatedItem(item_id, item.product_id, item.quantity, item.shards)
                for item_id, item in zip(item_ids, sale.items, strict=True)
            ],
        )


# sale show
class SaleItem(View, frozen=True):
    item_id: int
    product_id: str
    price: int
    quantity: int
    sold: int
    shards: int
    paused: bool


class Sale(View, frozen=True):
    sale_id: int
    name: str
    starts_at: dt.datetime
    ends_at: dt.datetime
    payment_window_seconds: int
    armed_at: dt.datetime | None
    on_sale: bool  # armed and inside its window: the gateway sells its unpaused items
    items: list[SaleItem]


# sale arm (= POST /admin/sales/{id}/arm)
class ArmedSaleItem(View, frozen=True):
    item_id: int
    shards: int
    units: int
    held: int


class ArmedSale(View, frozen=True):
    sale_id: int
    items: list[ArmedSaleItem]

    @classmethod
    def of(cls, sale_id: int, armed: list[ArmedItem]) -> ArmedSale:
        return cls(sale_id, [ArmedSaleItem(a.item_id, a.shards, a.units, a.held) for a in armed])


# item (= GET /admin/items/{id}; a shard is the router's own ShardState, as the API's is)
class Item(View, frozen=True):
    item_id: int
    quantity: int
    sold: int
    paused: bool
    units_left: int
    shards: list[ShardState]

    @classmethod
    def of(
        cls, item_id: int, quantity: int, sold: int, paused: bool, states: list[ShardState]
    ) -> Item:
        return cls(item_id, quantity, sold, paused, sum(s.stock for s in states), list(states))


# reconcile: one entry per item or voucher, the same for both: the report's own fields
# (jobs/reconcile.py's ItemReport, jobs/voucher_reconcile.py's VoucherReport: the database's
# counts and Redis's units) and then what the audit found (jobs/audit.py). A field a report gains
# is added here too; none is renamed or removed.
AUDITED = ("holds", "outbox", "in_flight", "stale", "ghosts", "lost", "kafka_lag", "drift")


def check(report: HoldAudit[Any, Any]) -> View:
    from jobs.audit import HoldAudit  # at run time only: the jobs are not imported for --help

    audit = {f.name for f in dataclasses.fields(HoldAudit)}
    own = tuple(f.name for f in dataclasses.fields(report) if f.name not in audit)
    values = {name: getattr(report, name) for name in (*own, *AUDITED)}
    values["stale"] = len(report.stale)  # the count: the holds themselves are for --fix
    return _check_view(own)(**values)


@functools.cache
def _check_view(own: tuple[str, ...]) -> type[View]:
    """The entry's shape for a report with these own fields."""
    shape = msgspec.defstruct("Check", (*own, *AUDITED), bases=(View,), frozen=True)
    return cast(type[View], shape)


class Reconciliation(View, frozen=True):
    drift: int  # the sum over items and vouchers; the exit status is 1 when it is not 0
    fixed: bool  # --fix ran (the numbers are those after the fix)
    items: list[View]  # check(ItemReport)
    vouchers: list[View]  # check(VoucherReport)


# voucher create / show / arm
def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


class VoucherTerms(View, frozen=True):
    code: str
    discount_amount: int
    min_order_amount: int
    total_limit: int
    per_customer_limit: int
    starts_at: dt.datetime
    ends_at: dt.datetime
    is_flash: bool

    @classmethod
    def of(cls, v: Voucher) -> VoucherTerms:
        return cls(
            v.code,
            v.discount_amount,
            v.min_order_amount,
            v.total_limit,
            v.per_customer_limit,
            _utc(v.starts_at),
            _utc(v.ends_at),
            v.is_flash,
        )


class CreatedVoucher(VoucherTerms, frozen=True, omit_defaults=True):
    """= POST /admin/vouchers's 201 body: the terms, and for a flash voucher whether it was
    armed (``remaining``, ``held``, ``inFlight``) or why not (``armError``)."""

    armed: bool | None = None
    remaining: int | None = None
    held: int | None = None
    in_flight: int | None = None
    arm_error: str | None = None


class ArmedVoucherView(View, frozen=True):
    """= POST /admin/vouchers/{code}/arm."""

    code: str
    remaining: int
    held: int
    in_flight: int

    @classmethod
    def of(cls, a: ArmedVoucher) -> ArmedVoucherView:
        return cls(a.code, a.remaining, a.held, a.in_flight)


class VoucherShown(View, frozen=True):
    voucher: VoucherTerms
    check: View  # check(report): the same object as an entry of reconcile's "vouchers"


# expiry --once: how many orders and voucher uses the pass expired; a dry run says what it
# would expire, and where: the unpaid orders due per item, the held uses due per code.
class DueItem(View, frozen=True):
    item_id: int
    orders: int


class DueVoucher(View, frozen=True):
    code: str
    uses: int


class Expiry(View, frozen=True, omit_defaults=True):
    expired: int
    items: list[DueItem] | None = None  # a dry run's only, as are the vouchers
    vouchers: list[DueVoucher] | None = None

    @classmethod
    def due(cls, due: Due) -> Expiry:
        return cls(
            due.total,
            [DueItem(item, n) for item, n in sorted(due.orders.items())],
            [DueVoucher(code, n) for code, n in sorted(due.uses.items())],
        )


# watch --json: one per refresh, one line each. Figures are per second (answers), seconds
# (latency), messages (lag); null where nothing was measured (no request, Redis silent).
class WatchShard(View, frozen=True):
    shard: int
    node: str
    left: int | None
    holds: int | None
    outbox: int | None
    sold_db: int
    failed_db: int


class WatchItem(View, frozen=True):
    item_id: int
    product_id: str
    quantity: int
    sold: int
    paused: bool
    left: int | None
    holds: int | None
    shards: list[WatchShard]


class Latency(View, frozen=True):
    p50: float | None
    p99: float | None


class WatchAlert(View, frozen=True):
    name: str
    state: str
    labels: dict[str, str]
    summary: str


class WatchFigures(View, frozen=True):
    source: str
    answers: dict[str, float]
    reservation: Latency
    routes: dict[str, Latency]
    writer_lag: dict[str, float]
    findings: dict[str, dict[str, float]]
    alerts: list[WatchAlert] | None  # null: unknown (Prometheus did not answer)
    missing: list[str]


class WatchFrame(View, frozen=True):
    at: dt.datetime
    sale_id: int
    name: str
    redis_error: str
    items: list[WatchItem]
    figures: WatchFigures

    @classmethod
    def of(cls, sale: SaleView, figures: Figures, at: dt.datetime) -> WatchFrame:
        items = [
            WatchItem(
                i.item_id,
                i.product_id,
                i.quantity,
                i.sold,
                i.paused,
                i.left,
                i.holds,
                [
                    WatchShard(s.shard, s.node, s.left, s.holds, s.outbox, s.sold_db, s.failed_db)
                    for s in i.shards
                ],
            )
            for i in sale.items
        ]
        alerts = (
            None
            if figures.alerts is None
            else [WatchAlert(a.name, a.state, dict(a.labels), a.summary) for a in figures.alerts]
        )
        shown = WatchFigures(
            figures.source,
            dict(figures.answers),
            Latency(*figures.reservation),
            {route: Latency(*q) for route, q in figures.routes.items()},
            dict(figures.writer_lag),
            {item: dict(found) for item, found in figures.findings.items()},
            alerts,
            list(figures.missing),
        )
        return cls(at, sale.sale_id, sale.name, sale.redis_error, items, shown)


# report SALE_ID --json: the summary's figures; moments RFC 3339, latency in seconds.
class ReportItem(View, frozen=True):
    item_id: int
    quantity: int
    statuses: dict[str, int]  # orders in the database by status
    sold_out_at: dt.datetime | None  # the earlier of the two below; null: not sold out
    sold_out_db: dt.datetime | None  # the last unit's reservation
    sold_out_redis: dt.datetime | None  # Prometheus first read 0 units left


class Report(View, frozen=True):
    sale_id: int
    name: str
    source: str
    start: dt.datetime
    end: dt.datetime
    step_seconds: float
    answered: dict[str, float]  # answers over the window, by outcome
    items: list[ReportItem]
    latency_peak: dict[str, float]  # "reservation p99" -> seconds
    writer_lag_peak: dict[str, float]  # topic -> messages
    chart: str  # the PNG's path

    @classmethod
    def of(cls, t: Timeline, chart: str) -> Report:
        from flashsale.observe.summary import peak_of

        def moment(epoch: float | None) -> dt.datetime | None:
            return None if epoch is None else _utc(epoch)

        items = [
            ReportItem(
                i.item_id,
                i.quantity,
                dict(i.statuses),
                moment(i.sold_out_at),
                moment(i.sold_out_db),
                moment(i.sold_out_redis),
            )
            for i in t.items
        ]

        def peaks(series: dict[str, Any]) -> dict[str, float]:
            found = {name: peak_of(points) for name, points in sorted(series.items())}
            return {name: value for name, value in found.items() if value is not None}

        return cls(
            t.sale_id,
            t.name,
            t.source,
            _utc(t.start),
            _utc(t.end),
            t.step,
            dict(t.answered),
            items,
            peaks(t.latency),
            peaks(t.writer_lag),
            chart,
        )


# fairness SALE_ID --json: NaN (nobody on that side) is null.
class ShardWins(View, frozen=True):
    shard: int
    winners: int
    joiners: int


class AddressTickets(View, frozen=True):
    address: str
    tickets: int


class FairnessView(View, frozen=True):
    sale_id: int
    joined_early: int  # before the start
    joined_late: int
    frontier: int  # admitted up to this place
    rho_early: float | None  # rank correlation of arrival and place (0: a random order)
    rho_late: float | None  # of join time and place (1: first come, first served)
    won_early: int
    won_late: int
    per_shard: list[ShardWins]  # by home shard
    addresses: int
    most_tickets: list[AddressTickets]  # the ten addresses that took the most
    chart: str

    @classmethod
    def of(cls, f: Fairness, chart: str) -> FairnessView:
        from collections import Counter

        def number(value: float) -> float | None:
            return None if value != value else value  # NaN: no pairs to rank

        return cls(
            f.sale_id,
            len(f.early),
            len(f.late),
            f.frontier,
            number(f.rho_early),
            number(f.rho_late),
            f.won_early,
            f.won_late,
            [ShardWins(k, w, n) for k, (w, n) in sorted(f.per_shard.items())],
            len(f.per_address),
            [AddressTickets(a, n) for a, n in Counter(f.per_address).most_common(10)],
            chart,
        )
