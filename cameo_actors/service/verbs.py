"""How an operation of the service shows on the command line: the CLI's part of a row of
the operations table (`Operation.cli`), and the parsers of the texts it takes.

A row's `Verb` names its command ("pool add", or "submit --check": a flag of `submit`).
The command's arguments come from the row itself (`cli.arguments` builds them): its path
parameters are positional, in order; its query parameters and its body model's fields are
options, typed from their annotations, with their descriptions as help. An `Arg` changes
how one of them shows (a flag of its own, positional, a metavar, a parser of its text); a
`Flag` is an option that is not part of the request: how the command reads its input or
shows the answer (`--json`, `--wait`).

>>> Verb("pool add").command, Verb("pool add").action, Verb("submit --check").action
('pool', 'add', '--check')

Pure data: no argparse here, so the table stays cheap to import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.service.errors import ConfigError


@dataclass(frozen=True)
class Arg:
    """How one input of an operation (a path or query parameter, a body field) shows on
    the command line; what it leaves out comes from the parameter or the model's field.

    Attributes:
        flag: its option ("--target"); default: its name with dashes.
        positional: a positional argument (path parameters always are).
        metavar: its placeholder in the usage ("MS").
        help: its help; default: the parameter's or the field's description.
        many: a positional given one or more times (`cancel NAME...`); the command is
            then called once per value.
        parse: reads its text into the request's value (default: by its type); its
            `ConfigError` names the option.
    """

    flag: str = ""
    positional: bool = False
    metavar: str = ""
    help: str = ""
    many: bool = False
    parse: Callable[[str], Any] | None = None


@dataclass(frozen=True)
class Flag:
    """An option of a command that is not part of its request: how the command reads its
    input or shows the answer (`--json`, `--wait`, `--batch N`).

    Attributes:
        flag: the option ("--wait-timeout"); the command reads it as `wait_timeout`.
        help: its help line.
        type: reads its value (None: a switch, off unless given).
        default: its value when not given.
        metavar: its placeholder in the usage.
        repeat: it may be given several times (a list).
    """

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str = ""
    repeat: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Verb:
    """An operation's command.

    Attributes:
        words: "pool add": the command (`pool`) and its action (`add`); an action that is
            a flag ("submit --check") is an option of the command that picks the row.
        help: the command's (or the action's) line in `--help`; default: the row's summary.
        description: more words for `cameo COMMAND --help`.
        args: how some of the row's inputs show, by name (`Arg`).
        flags: options that are not part of the request (`Flag`).
        input: the positional argument a body without a model (a spec, events) is read
            from: files, or '-' for stdin.
    """

    words: str
    help: str = ""
    description: str = ""
    args: Mapping[str, Arg] = field(default_factory=dict)
    flags: tuple[Flag, ...] = ()
    input: Arg | None = None

    @property
    def command(self) -> str:
        return self.words.split()[0]

    @property
    def action(self) -> str:
        """What follows the command: "" (none), a word ("add") or a flag ("--check")."""
        return " ".join(self.words.split()[1:])


#: What the command line says of path parameters the table leaves undescribed (their
#: OpenAPI entries stay as they are).
PATH_HELP = {"name": "the dataflow", "source": "the source (a step of the dataflow)",
             "token_id": "the token's id (`cameo token list`)"}


# -- the parsers of texts the CLI takes -----------------------------------------------------------
def parse_bins(text: str) -> list[int]:
    """Key bins from the command line: numbers and ranges separated by commas.

    >>> parse_bins("0-3,7")
    [0, 1, 2, 3, 7]
    """
    bins: list[int] = []
    try:
        for part in text.split(","):
            first, dash, last = part.strip().partition("-")
            lo = int(first)
            hi = int(last) if dash else lo
            if lo < 0 or hi < lo:
                raise ValueError(part)
            bins.extend(range(lo, hi + 1))
    except ValueError:
        raise ConfigError("--bins", "bin numbers or ranges separated by commas", text,
                          "e.g. --bins 0,1,2 or --bins 0-63") from None
    return bins


def parse_pin(text: str) -> tuple[str, int]:
    """A pin from the command line: STEP=N (N instances, at least 1).

    >>> parse_pin("win=4")
    ('win', 4)
    """
    step, eq, n = text.partition("=")
    try:
        parallelism = int(n)
    except ValueError:
        parallelism = 0
    if not eq or not step.strip() or parallelism < 1:
        raise ConfigError("--pin", "STEP=N with N a whole number of instances >= 1", text,
                          "e.g. --pin win=4; --unpin win lets the policy decide again")
    return step.strip(), parallelism


def parse_setting(text: str) -> tuple[str, Any]:
    """A KEY=VALUE setting from the command line, the value read as JSON (a number, true,
    false, null) or else as text.

    >>> parse_setting("target_utilization=0.7"), parse_setting("policy=ds2")
    (('target_utilization', 0.7), ('policy', 'ds2'))
    """
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise ConfigError("--setting", "KEY=VALUE", text, "e.g. --setting target_utilization=0.7")
    return key.strip(), parse_value(value)


def parse_value(text: str) -> Any:
    """A value from the command line: JSON (a number, true, a list) or else the text.

    >>> parse_value("3"), parse_value("[1, 2]"), parse_value("ds2")
    (3, [1, 2], 'ds2')
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
