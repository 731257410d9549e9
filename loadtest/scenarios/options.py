"""The locustfile's own command-line options (also read from ``FLASHSALE_LOAD_*`` variables and
shown in the web UI). Locust forwards them from the master to every worker with each spawn.

Each option is one field of ``Options``: its default, its help and whether the web UI shows it
live beside it, and ``add_arguments`` and ``Options.of`` are made from the fields."""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any

ENV = "FLASHSALE_LOAD_"


def _option(default: Any, help: str, *, web_ui: bool = True) -> Any:
    return field(default=default, metadata={"help": help, "web_ui": web_ui})


@dataclass(frozen=True, slots=True)
class Options:
    item_id: int = _option(0, "item to buy; 0 creates and arms a fresh sale at test start")
    voucher: str = _option(
        "", "voucher code for VoucherBurst; empty creates a flash voucher at test start"
    )
    opens_at: float = _option(
        0.0, "epoch seconds the given item's sale opens (buyers wait for it); 0: already open"
    )
    sale_id: int = _option(
        0, "the given item's sale: the waiting-room scenarios join its queue (RoomShopper)"
    )
    waiting_room: bool = _option(
        False, "a sale created at test start has a waiting room (docs/waiting-room.md)"
    )
    units: int = _option(2000, "units of a sale created at test start")
    shards: int = _option(4, "stock shards of a sale created at test start")
    opens_in: float = _option(3.0, "a sale created at test start opens this many seconds later")
    voucher_limit: int = _option(1000, "uses of a voucher created at test start")
    buyers: int = _option(
        20000, "FlashSaleSpike: distinct buyers in the crowd, shared out over the workers"
    )
    polls: int = _option(3, "status polls after a 202 (stops early once the order leaves PENDING)")
    poll_interval: float = _option(0.5, "seconds between status polls")
    pay_share: float = _option(
        0.5, "share of winners who pay (the rest abandon; SteadyShopper cancels some)"
    )
    retries: int = _option(
        1, "resends after a 503 (honouring Retry-After) or, in RetryStorm, a timeout"
    )
    retry_timeout: float = _option(
        1.0, "RetryStorm's client timeout in seconds (it resends when it runs out)"
    )
    bot_rate: float = _option(
        50.0, "BotMix: purchase requests per second per bot (the per-user limit is 5/s)"
    )
    outcome_file: str = _option(
        "",
        "write the answer counts and every 202's orderId here (JSON) when Locust quits",
        web_ui=False,
    )
    progress: bool = _option(
        False, "print a PROGRESS line every second (master or standalone)", web_ui=False
    )

    @classmethod
    def of(cls, parsed: Any) -> Options:
        """From Locust's parsed options (values may arrive as strings from the web UI; an empty
        one is the default)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value, default = getattr(parsed, f.name), _default(f)
            values[f.name] = default if value in (None, "") else type(default)(value)
        return cls(**values)


def _default(f: Field[Any]) -> Any:
    return f.default


def add_arguments(parser: Any) -> None:
    """``events.init_command_line_parser`` listener: ``--item-id`` and so on, one per field."""
    for f in fields(Options):
        named: dict[str, Any] = {"env_var": ENV + f.name.upper(), "help": f.metadata["help"]}
        if not f.metadata["web_ui"]:
            named["include_in_web_ui"] = False
        default = _default(f)
        if isinstance(default, bool):
            named["action"] = "store_true"
        else:
            named.update(type=type(default), default=default)
        parser.add_argument("--" + f.name.replace("_", "-"), **named)
