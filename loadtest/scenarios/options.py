"""The locustfile's own command-line options (also read from ``FLASHSALE_LOAD_*`` variables and
shown in the web UI). Locust forwards them from the master to every worker with each spawn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENV = "FLASHSALE_LOAD_"


def add_arguments(parser: Any) -> None:
    """``events.init_command_line_parser`` listener."""
    arg = parser.add_argument
    arg(
        "--item-id",
        type=int,
        default=0,
        env_var=ENV + "ITEM_ID",
        help="item to buy; 0 creates and arms a fresh sale at test start",
    )
    arg(
        "--voucher",
        default="",
        env_var=ENV + "VOUCHER",
        help="voucher code for VoucherBurst; empty creates a flash voucher at test start",
    )
    arg(
        "--opens-at",
        type=float,
        default=0.0,
        env_var=ENV + "OPENS_AT",
        help="epoch seconds the given item's sale opens (buyers wait for it); 0: already open",
    )
    arg(
        "--units",
        type=int,
        default=2000,
        env_var=ENV + "UNITS",
        help="units of a sale created at test start",
    )
    arg(
        "--shards",
        type=int,
        default=4,
        env_var=ENV + "SHARDS",
        help="stock shards of a sale created at test start",
    )
    arg(
        "--opens-in",
        type=float,
        default=3.0,
        env_var=ENV + "OPENS_IN",
        help="a sale created at test start opens this many seconds later",
    )
    arg(
        "--voucher-limit",
        type=int,
        default=1000,
        env_var=ENV + "VOUCHER_LIMIT",
        help="uses of a voucher created at test start",
    )
    arg(
        "--buyers",
        type=int,
        default=20000,
        env_var=ENV + "BUYERS",
        help="FlashSaleSpike: distinct buyers in the crowd, shared out over the workers",
    )
    arg(
        "--polls",
        type=int,
        default=3,
        env_var=ENV + "POLLS",
        help="status polls after a 202 (stops early once the order leaves PENDING)",
    )
    arg(
        "--poll-interval",
        type=float,
        default=0.5,
        env_var=ENV + "POLL_INTERVAL",
        help="seconds between status polls",
    )
    arg(
        "--pay-share",
        type=float,
        default=0.5,
        env_var=ENV + "PAY_SHARE",
        help="share of winners who pay (the rest abandon; SteadyShopper cancels some)",
    )
    arg(
        "--retries",
        type=int,
        default=1,
        env_var=ENV + "RETRIES",
        help="resends after a 503 (honouring Retry-After) or, in RetryStorm, a timeout",
    )
    arg(
        "--retry-timeout",
        type=float,
        default=1.0,
        env_var=ENV + "RETRY_TIMEOUT",
        help="RetryStorm's client timeout in seconds (it resends when it runs out)",
    )
    arg(
        "--bot-rate",
        type=float,
        default=50.0,
        env_var=ENV + "BOT_RATE",
        help="BotMix: purchase requests per second per bot (the per-user limit is 5/s)",
    )
    arg(
        "--outcome-file",
        default="",
        env_var=ENV + "OUTCOME_FILE",
        include_in_web_ui=False,
        help="write the answer counts and every 202's orderId here (JSON) when Locust quits",
    )
    arg(
        "--progress",
        action="store_true",
        env_var=ENV + "PROGRESS",
        include_in_web_ui=False,
        help="print a PROGRESS line every second (master or standalone)",
    )


@dataclass(frozen=True, slots=True)
class Options:
    item_id: int
    voucher: str
    opens_at: float
    units: int
    shards: int
    opens_in: float
    voucher_limit: int
    buyers: int
    polls: int
    poll_interval: float
    pay_share: float
    retries: int
    retry_timeout: float
    bot_rate: float
    outcome_file: str
    progress: bool

    @classmethod
    def of(cls, parsed: Any) -> Options:
        """From Locust's parsed options (values may arrive as strings from the web UI)."""
        return cls(
            item_id=int(parsed.item_id or 0),
            voucher=str(parsed.voucher or ""),
            opens_at=float(parsed.opens_at or 0),
            units=int(parsed.units),
            shards=int(parsed.shards),
            opens_in=float(parsed.opens_in),
            voucher_limit=int(parsed.voucher_limit),
            buyers=int(parsed.buyers),
            polls=int(parsed.polls),
            poll_interval=float(parsed.poll_interval),
            pay_share=float(parsed.pay_share),
            retries=int(parsed.retries),
            retry_timeout=float(parsed.retry_timeout),
            bot_rate=float(parsed.bot_rate),
            outcome_file=str(parsed.outcome_file or ""),
            progress=bool(parsed.progress),
        )
