"""What ``sale`` and ``voucher`` share: one command group of create, show and arm, written once.

``create`` takes the API's request body from ``--from FILE`` or builds it from options (a
``Form``, which declares every argument of create), each option's default applying only when
no file is given; ``show`` and ``arm`` name one ``Subject`` (a SALE_ID, a CODE); arming's refusal
is one line; each prints JSON or text.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from domain.errors import NotReady
from flashsale.cli import output
from flashsale.cli.errors import Failure, UsageError
from flashsale.cli.inputs import moment, options_or_defaults, read_body, refuse_options_with_file
from flashsale.cli.parser import (
    Handler,
    Subcommands,
    add_dry_run,
    add_json,
    add_yes,
    at_least,
    command,
    integer,
    subcommands,
)
from flashsale.cli.validate import convert, decode

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """One option of a create form; its help ends with its default."""

    flag: str  # "--quantity"
    field: str  # the API field it fills, as a refusal names it: "$.items[0].quantity"
    default: Any
    help: str
    type: Callable[[str], Any] = str
    metavar: str | None = None
    after_default: str = ""  # said after the default: ", a day"

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def add_to(self, group: argparse._ArgumentGroup) -> None:
        # The parser's default stays None, so a file can tell a typed option from a default.
        group.add_argument(
            self.flag,
            type=self.type,
            metavar=self.metavar,
            help=f"{self.help} (default: {self.default!r}{self.after_default})",
        )


def window(until: str, state: str, duration: int, after_default: str = "") -> list[Option]:
    """``--starts-in`` and ``--duration``: when it ``until`` ("opens") and how long it stays
    ``state`` ("open"); ``moments`` turns them into the API's ``startsAt`` and ``endsAt``."""
    return [
        Option(
            "--starts-in",
            "$.startsAt",
            0,
            f"seconds from now until it {until}; negative: already {state}",
            integer,
            "SECONDS",
        ),
        Option(
            "--duration",
            "$.endsAt",
            duration,
            f"seconds it stays {state}, >= 1",
            at_least(1),
            "SECONDS",
            after_default,
        ),
    ]


def moments(values: Mapping[str, Any]) -> tuple[dt.datetime, dt.datetime]:
    """``startsAt`` and ``endsAt`` from the values of ``window``'s options."""
    starts_at = moment(dt.datetime.now(dt.UTC), values["starts_in"], "--starts-in")
    return starts_at, moment(starts_at, values["duration"], "--duration")


@dataclass(frozen=True)
class Form(Generic[T]):
    """``create``'s input: the API's request ``kind`` from ``--from FILE``, or from options."""

    what: str  # "sale", "voucher": in refusals
    kind: type[T]  # the API's request type (NewSale, NewVoucher)
    options: Sequence[Option]
    # The request body from the options' values (each default where none was given) and args.
    body: Callable[[Mapping[str, Any], argparse.Namespace], dict[str, Any]]
    source_help: str  # --from's help
    title: str  # the options' group: "a voucher from options"
    # Switches (store_true) a file excludes too, with their help: {"flash": "a flash voucher: …"}
    flags: Mapping[str, str] = field(default_factory=dict)
    positional: str | None = None  # an argument the file holds too ("code"), given otherwise
    positional_help: str = ""

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """The positional argument, --from, and the options and switches (in a group)."""
        if self.positional is not None:
            parser.add_argument(
                self.positional,
                nargs="?",
                metavar=self.positional.upper(),
                help=self.positional_help,
            )
        parser.add_argument("--from", dest="source", metavar="FILE", help=self.source_help)
        group = parser.add_argument_group(f"{self.title} (each has a default)")
        for option in self.options:
            option.add_to(group)
        for flag, text in self.flags.items():
            group.add_argument(f"--{flag}", action="store_true", help=text)

    def read(self, args: argparse.Namespace) -> T:
        """The request, decoded (and refused) as the API decodes it."""
        name = self.positional
        given = name is not None and getattr(args, name) is not None
        if args.source is None:
            if name is not None and not given:
                raise UsageError(
                    f"{name.upper()}: is required (or give the whole {self.what} with --from FILE)"
                )
            values = options_or_defaults(args, {o.dest: o.default for o in self.options})
            fields = {o.field: o.flag for o in self.options}
            if name is not None:
                fields[f"$.{name}"] = name.upper()
            return convert(self.body(values, args), self.kind, fields)
        if name is not None and given:
            raise UsageError(
                f"--from: the file holds the whole {self.what}, its {name} too; drop {name.upper()}"
            )
        refuse_options_with_file(args, [*(o.dest for o in self.options), *self.flags], self.what)
        data, source = read_body(args.source)
        return decode(data, self.kind, source)


@dataclass(frozen=True)
class Subject:
    """What ``show`` and ``arm`` name: a sale by its SALE_ID, a voucher by its CODE."""

    noun: str  # "sale"
    name: str  # "id": the argument's help is "the sale's id"
    metavar: str  # "SALE_ID"; the argument's dest is its lower case
    rule: Any  # the API's type for it (RowId, Code): refused as the API refuses it
    type: Callable[[str], Any] = str  # how argparse reads it

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            self.metavar.lower(),
            type=self.type,
            metavar=self.metavar,
            help=f"the {self.noun}'s {self.name}",
        )

    def of(self, args: argparse.Namespace) -> Any:
        return convert(getattr(args, self.metavar.lower()), self.rule, {"$": self.metavar})


@dataclass(frozen=True)
class Command:
    summary: str
    handler: Handler


class Group:
    """``<noun> create|show|arm``: one subject's command group. Each action's handler is declared
    where it is written, under its summary (``@GROUP.action("show", "print a sale")``); add_to()
    adds the group to the command line. ``create`` takes ``form``'s arguments."""

    ACTIONS = ("create", "show", "arm")

    def __init__(
        self, subject: Subject, summary: str, form: Form[Any], dry_run: bool = False
    ) -> None:
        self.subject = subject
        self.summary = summary
        self.form = form
        self.dry_run = dry_run  # create and arm take --dry-run (their handlers honour it)
        self.commands: dict[str, Command] = {}

    def action(self, name: str, summary: str) -> Callable[[Handler], Handler]:
        """A decorator: the handler of action ``name``, listed with ``summary``."""
        assert name in self.ACTIONS, f"{self.subject.noun}: no action {name!r}"

        def declare(handler: Handler) -> Handler:
            self.commands[name] = Command(summary, handler)
            return handler

        return declare

    def add_to(self, sub: Subcommands) -> None:
        create, show, arm = (self.commands[name] for name in self.ACTIONS)
        parser = command(sub, self.subject.noun, self.summary)
        actions = subcommands(parser, "action")
        p = command(actions, "create", create.summary, create.handler)
        self.form.add_to(p)
        if self.dry_run:
            add_dry_run(p, f"the {self.subject.noun} that would be created (as JSON)")

        p = command(actions, "show", show.summary, show.handler)
        self.subject.add_to(p)
        add_json(p)

        p = command(actions, "arm", arm.summary, arm.handler)
        self.subject.add_to(p)
        add_yes(p, f"re-arm a {self.subject.noun} that is armed already")
        if self.dry_run:
            add_dry_run(p, "what arming would load, after arm's read-only refusals")
        add_json(p)


async def arming(what: str, arm: Awaitable[T]) -> T:
    """``arm``'s answer; its refusal (replicas not in sync, on sale) as a Failure."""
    try:
        return await arm
    except NotReady as exc:
        raise Failure(f"{what} not armed: {exc}") from exc


def show(args: argparse.Namespace, view: Any, text: Callable[[], str]) -> int:
    """Print ``view`` as JSON with --json, else ``text()``; the exit status."""
    if args.json:
        output.print_json(view)
    else:
        print(text())
    return 0
