"""The `cameo` commands, built from the operations table as the routes are.

Each verb of the table (`Operation.cli`) belongs to a command, its first word. A command's
arguments are its rows' inputs: path parameters are positional, in order; query parameters
and body fields (a nested model's fields too) are options, typed from their annotations
(a `Literal` gives the choices, a bool a `--x / --no-x` switch, a list or a dict an option
to repeat), with the parameter's or the field's description as help, and the service's
default said there (an option left out is not sent: the service's default applies). The
row's `Verb` adds what the inputs cannot say (`verbs.Arg`, `verbs.Flag`). A verb of more
words is an action of its command: `pool add`, `pool remove INDEX`; a flag of it
(`submit --check`) picks its row.

>>> from cameo_actors.service.operations import OPERATION
>>> usage("pool remove", [OPERATION["remove_executor"]])
'pool remove INDEX'
>>> [i.name for i in inputs(OPERATION["update"])]
['name', 'latency_target_ms', 'weight']
"""

from __future__ import annotations

import argparse
import textwrap
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from cameo_actors.service.errors import ConfigError
from cameo_actors.service.operations import Operation
from cameo_actors.service.verbs import PATH_HELP, Arg, Flag, Verb, parse_setting, parse_value

#: What runs a command: its word, its rows, and the parsed arguments; the exit status.
Runner = Callable[[str, tuple[Operation, ...], argparse.Namespace], int]
#: Where an input goes in the request.
Where = Literal["path", "query", "body", "file"]
#: How an input's text is read (`Input.kind`).
Kind = Literal["switch", "choice", "scalar", "list", "dict", "model", "value"]
#: First words of summaries that keep their capital in a line of `--help`.
PROPER_NOUNS = frozenset({"Prometheus", "Ray", "Arrow", "OpenAPI"})
#: Names the parser itself uses; an input may not take them.
RESERVED = frozenset({"func", "command", "action", "arg", "words"})


@dataclass(frozen=True)
class Input:
    """One input of an operation, as the command line takes it.

    Attributes:
        name: its name (the request's, and the parsed argument's).
        where: where it goes: a path or query parameter, a body field, or the files a body
            without a model is read from.
        annotation: its type.
        help: its description.
        default: the service's default, said in the help (None: none to say).
        required: the request needs it.
        arg: how it shows (`verbs.Arg`).
        group: the body field of a nested model it belongs to ("settings").
    """

    name: str
    where: Where
    annotation: Any
    help: str = ""
    default: Any = None
    required: bool = False
    arg: Arg = field(default_factory=Arg)
    group: str = ""

    @property
    def positional(self) -> bool:
        return self.where in ("path", "file") or self.arg.positional

    @property
    def flag(self) -> str:
        return self.arg.flag or "--" + self.name.replace("_", "-")

    @property
    def metavar(self) -> str:
        """Its placeholder: the Arg's, else an option's by its type (N, X, KEY=VALUE), else
        its name."""
        if self.arg.metavar or self.positional:
            return self.arg.metavar or self.name.upper()
        bare = _bare(self.annotation)
        if get_origin(bare) is list:
            bare = _bare(get_args(bare)[0])
        return {int: "N", float: "X"}.get(bare) or (
            "KEY=VALUE" if self.kind == "dict" else self.name.upper())

    @property
    def kind(self) -> Kind:
        """How the text is read: switch, choice, scalar, list, dict or value (JSON or text)."""
        return _kind(self.annotation)


def _bare(annotation: Any) -> Any:
    """A type without `None` in a union, nor `Annotated`'s metadata."""
    if get_origin(annotation) is Annotated:
        return _bare(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return _bare(rest[0]) if len(rest) == 1 else annotation
    return annotation


def _kind(annotation: Any) -> Kind:
    bare = _bare(annotation)
    origin = get_origin(bare)
    if bare is bool:
        return "switch"
    if origin is Literal:
        return "choice"
    if bare in (int, float, str):
        return "scalar"
    if origin is list:
        return "list"
    if origin is dict:
        return "dict"
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return "model"
    return "value"


def _item_type(annotation: Any) -> Callable[[str], Any]:
    """How argparse reads one value of an input: its scalar type, else as text."""
    bare = _bare(annotation)
    if get_origin(bare) is list:
        bare = _bare(get_args(bare)[0])
    return bare if bare in (int, float, str) else str


def inputs(op: Operation) -> list[Input]:
    """What `op` takes from the command line, in order: its path parameters, the files of
    a body without a model, its query parameters, its body's fields."""
    verb = op.verb or Verb(op.name)
    args = verb.args
    found = [Input(p.name, "path", p.type,
                   str(p.bounds.get("description") or PATH_HELP.get(p.name, "")),
                   required=True, arg=args.get(p.name, Arg())) for p in op.path_params()]
    if op.body is not None and op.body.model is None and verb.input is not None:
        found.append(Input("files" if verb.input.many else "file", "file", str,
                           verb.input.help, required=True, arg=verb.input))
    found += [Input(p.name, "query", p.type, str(p.bounds.get("description") or ""),
                    p.default, arg=args.get(p.name, Arg())) for p in op.query_params()]
    if op.body is not None and op.body.model is not None:
        found += _fields(op.body.model, args)
    for i in found:
        if i.name in RESERVED:
            raise ValueError(f"operation {op.name!r}: expected inputs named otherwise than "
                             f"{sorted(RESERVED)} (the command line's own), got {i.name!r}; "
                             "fix: rename it, or give it an Arg(flag=...)")
    return found


def _fields(model: type[BaseModel], args: Any, group: str = "") -> list[Input]:
    found: list[Input] = []
    for name, info in model.model_fields.items():
        if _kind(info.annotation) == "model":
            found += _fields(_bare(info.annotation), args, group=name)
            continue
        default = None if info.default is PydanticUndefined else info.default
        found.append(Input(name, "body", info.annotation, info.description or "", default,
                           info.is_required(), args.get(name, Arg()), group))
    return found


# -- the parser -------------------------------------------------------------------------------------
def commands(operations: Sequence[Operation]) -> dict[str, tuple[Operation, ...]]:
    """The rows with a verb, by command (the verb's first word), in the table's order."""
    found: dict[str, list[Operation]] = {}
    for op in operations:
        if op.verb is not None:
            found.setdefault(op.verb.command, []).append(op)
    return {word: tuple(rows) for word, rows in found.items()}


def _verbs(rows: Sequence[Operation]) -> dict[str, list[Operation]]:
    """The rows of a command by verb (its words), in order."""
    found: dict[str, list[Operation]] = {}
    for op in rows:
        if op.verb is not None:
            found.setdefault(op.verb.words, []).append(op)
    return found


def _actions(rows: Sequence[Operation]) -> list[str]:
    """A command's word actions ("add", "remove"), in order."""
    return list(dict.fromkeys(op.verb.action for op in rows
                              if op.verb is not None and op.verb.action
                              and not op.verb.action.startswith("-")))


def _positionals(rows: Sequence[Operation]) -> list[tuple[Input, bool]]:
    """The positional inputs of rows sharing their positionals, with whether every row
    takes each (else it is optional)."""
    found: dict[str, tuple[Input, int]] = {}
    for op in rows:
        for i in inputs(op):
            if i.positional:
                first, count = found.get(i.name, (i, 0))
                found[i.name] = (first, count + 1)
    return [(i, count == len(rows)) for i, count in found.values()]


def _help_of(rows: Sequence[Operation]) -> str:
    """A verb's line: the first help its rows' verbs give, else the first summary (from
    a small letter, as the command line's lines are)."""
    for op in rows:
        if op.verb is not None and op.verb.help:
            return op.verb.help
    text = next((op.summary for op in rows if op.summary), rows[0].name.replace("_", " "))
    first = text.split(maxsplit=1)[0]
    return text if first in PROPER_NOUNS else text[:1].lower() + text[1:]


def _shown(i: Input, required: bool) -> str:
    text = i.metavar + ("..." if i.arg.many else "")
    return text if required else f"[{text}]"


def usage(words: str, rows: Sequence[Operation]) -> str:
    """A verb with its positional arguments ("pool remove INDEX", "status [NAME]")."""
    return " ".join([words] + [_shown(i, req) for i, req in _positionals(rows)])


def overview(operations: Sequence[Operation], first: Sequence[tuple[str, str]] = ()) -> str:
    """Every verb with its positional arguments and its line, for `cameo --help`."""
    lines = list(first) + [(usage(words, verb_rows), _help_of(verb_rows))
                           for rows in commands(operations).values()
                           for words, verb_rows in _verbs(rows).items()]
    return "\n".join(_entry("cameo " + left, text) for left, text in lines)


def _entry(left: str, text: str, width: int = 100, column: int = 34) -> str:
    """`left` and `text` in two columns, the text wrapped."""
    body = textwrap.wrap(text, width - column) or [""]
    if len(left) + 2 > column:
        return "\n".join(["  " + left] + [" " * column + line for line in body])
    return "\n".join([("  " + left).ljust(column) + body[0]]
                     + [" " * column + line for line in body[1:]])


def add_command(sub: Any, word: str, rows: tuple[Operation, ...],
                parents: list[argparse.ArgumentParser], run: Runner) -> argparse.ArgumentParser:
    """The command `word` of `rows`: positional arguments, options and the help."""
    verbs = _verbs(rows)
    lines = [_entry("cameo " + usage(words, vrows), _help_of(vrows))
             for words, vrows in verbs.items()]
    more = "".join("\n\n" + textwrap.fill(op.verb.description, 96) for op in rows
                   if op.verb is not None and op.verb.description)
    p: argparse.ArgumentParser = sub.add_parser(
        word, parents=parents, help=_help_of(rows), description="\n".join(lines) + more,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = _actions(rows)
    plain = [op for op in rows if op.verb is not None
             and (not op.verb.action or op.verb.action.startswith("-"))]
    if actions and not plain:  # `pool add`, `pool remove INDEX`: the action, then its inputs
        p.add_argument("action", choices=actions)
        _slots(p, verbs)
    elif actions:  # `scaling [NAME]` beside `scaling set NAME`: words, read by the command
        shown = " ".join(_shown(i, False) for i, _ in _positionals(rows))
        p.add_argument("words", nargs="*", metavar=f"[{'|'.join(actions)}] {shown}".strip(),
                       help=" or ".join(usage(words, vrows) for words, vrows in verbs.items()))
    else:
        for i, required in _positionals(rows):
            nargs = ("+" if required else "*") if i.arg.many else (None if required else "?")
            p.add_argument(i.name, nargs=nargs, metavar=i.metavar, type=_item_type(i.annotation),
                           help=_text(i))
    for words, vrows in verbs.items():  # an action that is a flag: `submit --check`
        action = words.split(maxsplit=1)[1] if " " in words else ""
        if action.startswith("-"):
            p.add_argument(action, action="store_true", help=_help_of(vrows))
    _options(p, rows)
    p.set_defaults(func=lambda args: run(word, rows, args))
    return p


def _slots(p: argparse.ArgumentParser, verbs: dict[str, list[Operation]]) -> None:
    """The positional arguments after an action: slot k holds each action's k-th input."""
    per_action = {words.split(maxsplit=1)[1]: [i for i, _ in _positionals(rows)]
                  for words, rows in verbs.items()}
    for k in range(max((len(v) for v in per_action.values()), default=0)):
        at = [(action, found[k]) for action, found in per_action.items() if len(found) > k]
        p.add_argument("arg" if k == 0 else f"arg{k + 1}", nargs="?",
                       metavar="|".join(dict.fromkeys(i.metavar for _, i in at)),
                       help="; ".join(f"{action}: {_text(i)}" for action, i in at))


def _options(p: argparse.ArgumentParser, rows: Sequence[Operation]) -> None:
    """Every option of the rows (query parameters, body fields, flags), each once."""
    seen: set[str] = set()
    for op in rows:
        for i in inputs(op):
            if i.positional or i.name in seen:
                continue
            seen.add(i.name)
            kind = i.kind
            kwargs: dict[str, Any] = {"dest": i.name, "default": None, "help": _text(i)}
            if kind == "switch":
                kwargs["action"] = argparse.BooleanOptionalAction
            elif kind == "choice":  # shown as {a,b,c}
                kwargs["choices"] = list(get_args(_bare(i.annotation)))
            else:
                kwargs["metavar"] = i.metavar
                if kind == "dict" or (kind == "list" and not i.arg.parse):
                    kwargs["action"] = "append"  # repeated (a parser reads a list at once)
                kwargs["type"] = str if i.arg.parse else _item_type(i.annotation)
            p.add_argument(i.flag, **kwargs)
        for f in op.verb.flags if op.verb is not None else ():
            if f.dest not in seen:
                seen.add(f.dest)
                _flag(p, f)


def _flag(p: argparse.ArgumentParser, f: Flag) -> None:
    kwargs: dict[str, Any] = {"dest": f.dest, "default": f.default}
    if f.type is None:
        kwargs.update(action="store_true", help=f.help)
    else:
        kwargs.update(type=f.type, metavar=f.metavar or f.dest.upper(),
                      help=f.help + (f" (default {f.default:g})" if isinstance(f.default, float)
                                     else f" (default {f.default})" if f.default is not None
                                     else ""))
        if f.repeat:
            kwargs["action"] = "append"
    p.add_argument(f.flag, **kwargs)


def _text(i: Input) -> str:
    """An input's help: its own words, then the service's default."""
    text = i.arg.help or i.help or ("JSON or text" if i.kind == "value" else "")
    if i.arg.help or i.default is None or i.kind == "switch" or i.default in ([], {}):
        return text
    return f"{text} (default {i.default})"


# -- from the parsed arguments to a request -------------------------------------------------------
def _action(rows: Sequence[Operation], args: argparse.Namespace) -> str:
    """The action the arguments name: a word ("add"), a flag ("--check"), or none ("")."""
    actions = _actions(rows)
    words = getattr(args, "words", None)
    if getattr(args, "action", None) in actions:
        return str(args.action)
    if words and words[0] in actions:
        return str(words[0])
    return next((op.verb.action for op in rows if op.verb is not None
                 and op.verb.action.startswith("-")
                 and getattr(args, op.verb.action.lstrip("-").replace("-", "_"), False)), "")


def chosen(rows: Sequence[Operation], args: argparse.Namespace) -> tuple[str, Operation | None]:
    """The verb the arguments name, and its row: the one whose path parameters were all
    given, the most of them (None: none fits, e.g. a name missing)."""
    action = _action(rows, args)
    verb_rows = [op for op in rows if op.verb is not None and op.verb.action == action]
    words = f"{rows[0].verb.command if rows[0].verb else ''} {action}".strip()
    fits = [op for op in verb_rows
            if all(getattr(args, n, None) is not None for n in op.path_names)]
    return words, max(fits, key=lambda op: len(op.path_names), default=None)


def read(rows: Sequence[Operation], args: argparse.Namespace) -> None:
    """The parsed arguments made the request's values, in place: the words after an
    action named as the action's positional inputs (typed), and options read by their
    `Arg` parsers (a `ConfigError` names the option), a dict's KEY=VALUE items a dict."""
    action = _action(rows, args)
    given: list[str] | None = None
    if getattr(args, "action", None) is not None:  # `pool remove 3`: the slots
        given, k = [], 1
        while hasattr(args, "arg" if k == 1 else f"arg{k}"):
            value = getattr(args, "arg" if k == 1 else f"arg{k}")
            given += [] if value is None else [value]
            k += 1
    elif getattr(args, "words", None) is not None:  # `scaling set k`: the words
        given = list(args.words[1:] if action and args.words[:1] == [action] else args.words)
    if given is not None:
        verb_rows = [op for op in rows if op.verb is not None and op.verb.action == action]
        for (i, _), text in zip(_positionals(verb_rows), given, strict=False):
            setattr(args, i.name, _typed(i, text))
    seen: set[str] = set()
    for op in rows:
        for i in inputs(op):
            if i.name in seen or i.positional:
                continue
            seen.add(i.name)
            value = getattr(args, i.name, None)
            if value is not None:
                setattr(args, i.name, _parsed(i, value))


def _typed(i: Input, text: str) -> Any:
    kind = _item_type(i.annotation)
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number" if kind is float else "text"
        raise ConfigError(i.metavar, f"{what}: {_text(i)}", text,
                          f"give {i.metavar} as {what}") from None


def _parsed(i: Input, value: Any) -> Any:
    parse = i.arg.parse or (parse_setting if i.kind == "dict" else
                            parse_value if i.kind == "value" else None)
    if parse is None:
        return value
    if i.kind == "dict":
        return dict(parse(v) for v in value)
    if isinstance(value, list):
        return [parse(v) for v in value]
    return parse(value)


def request(op: Operation, args: argparse.Namespace
            ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """(path parameters, query parameters, body) of `op` from the parsed arguments: what
    was given (the service's defaults for the rest); a nested model's fields in their
    group. The files of a body without a model are the command's to read."""
    path: dict[str, Any] = {}
    params: dict[str, Any] = {}
    body: dict[str, Any] | None = {} if op.body is not None and op.body.model else None
    for i in inputs(op):
        value = getattr(args, i.name, None)
        if value is None or i.where == "file":
            continue
        if i.where == "path":
            path[i.name] = value
        elif i.where == "query":
            params[i.name] = value
        elif body is not None:
            (body.setdefault(i.group, {}) if i.group else body)[i.name] = value
    return path, params, body


def missing(words: str, op: Operation | None, rows: Sequence[Operation],
            args: argparse.Namespace) -> ConfigError | None:
    """What a generic command lacks: a row its positional arguments fit, or a required
    body field."""
    if op is None:
        verb_rows = [o for o in rows if o.verb is not None and o.verb.words == words]
        return ConfigError(words, usage(words, verb_rows or rows), "too few arguments",
                           f"see `cameo {words.split()[0]} --help`")
    lacking = [i for i in inputs(op) if i.required and i.where == "body"
               and getattr(args, i.name, None) is None]
    if lacking:
        return ConfigError(words, " ".join(i.flag for i in lacking), "none of them",
                           f"see `cameo {words.split()[0]} --help`")
    return None
