"""The `cameo` command: run the service (`cameo serve`), and talk to it.

Every other command is a verb of the operations table (`operations.OPERATIONS`) and takes
its arguments from the verb's rows (`cli.arguments`); a verb without a command function of
its own (`cli.commands`, `cli.reconfig`) prints the answer as JSON. `cameo --help` lists
every verb.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cameo_actors.errors import CameoError
from cameo_actors.service.cli import arguments, commands, reconfig
from cameo_actors.service.cli.arguments import commands as commands_of
from cameo_actors.service.cli.commands import load_specs, read_events, read_text
from cameo_actors.service.cli.output import print_json, quiet_exit
from cameo_actors.service.config import (
    CLIENT_OPTIONS,
    SERVE_OPTIONS,
    Option,
    option_help,
    resolve_client_config,
    resolve_service_config,
)
from cameo_actors.service.operations import OPERATIONS, Operation
from cameo_actors.service.verbs import parse_bins

if TYPE_CHECKING:
    from cameo_actors.service.client import Client

__all__ = ["build_parser", "load_specs", "main", "parse_bins", "read_events"]

#: The commands with a behaviour of their own, by verb.
COMMANDS = {**commands.COMMANDS, **reconfig.COMMANDS}

EXAMPLES = """\
  cameo serve                          # embedded Ray, API on 127.0.0.1:8470
  cameo serve --address 10.0.0.5:6379  # join a Ray cluster
  cameo submit flows.py spec.json      # Dataflow objects of a Python file, or JSON specs
  cameo submit --check spec.json       # would it (and every running one) meet its target?
  cameo status alerts                  # live view; --once for one frame
  cameo explain alerts --last 60s      # why it missed its target: its critical path, ranked
  cameo update alerts --target 30
  cameo push alerts logs events.jsonl  # events from a JSON-lines file (or '-')
  cameo results alerts --follow        # results as they come (committed once printed)
  cameo scale alerts win 4 --wait      # a keyed step to 4 instances, live
  cameo scaling set alerts --policy ds2 --max-parallelism 8 --pin win=4"""

CONNECTION = """\
Client commands find the service at --url / CAMEO_URL (else the one a local `cameo serve`
recorded in RUN_DIR/service/service.json, else 127.0.0.1:8470) and send the token of
--token / CAMEO_TOKEN / --token-file / CAMEO_TOKEN_FILE (else the local admin token file
RUN_DIR/service/admin_token). `cameo COMMAND --help` shows a command's options."""


def _add_options(p: Any, options: tuple[Option, ...]) -> None:
    """Add an option table's flags to a parser or argument group (defaults None, so the
    environment and the config file can fill in)."""
    for o in options:
        kwargs: dict[str, Any] = {"dest": o.name, "help": option_help(o), "default": None,
                                  "metavar": o.metavar or o.name.upper()}
        if o.repeat:
            kwargs["action"] = "append"
        p.add_argument(o.flag, **kwargs)


def _client(args: argparse.Namespace) -> Client:
    from cameo_actors.service.client import Client

    cfg = resolve_client_config({o.name: getattr(args, o.name, None) for o in CLIENT_OPTIONS})
    return Client.from_config(cfg)


def cmd_serve(args: argparse.Namespace) -> int:
    from cameo_actors.service.server import serve

    flags = {o.name: getattr(args, o.name) for o in SERVE_OPTIONS}
    flags["config"] = args.config
    return serve(resolve_service_config(flags))


def run(word: str, rows: tuple[Operation, ...], args: argparse.Namespace) -> int:
    """Run command `word`: its arguments read, then the verb's own command, or its row's
    request with the answer printed as JSON."""
    arguments.read(rows, args)
    words, op = arguments.chosen(rows, args)

    def connect() -> Client:
        return _client(args)  # looked up now: tests put an in-process client in its place

    command = COMMANDS.get(words)
    if command is not None:
        return command(args, connect)
    lacking = arguments.missing(words, op, rows, args)
    if lacking is not None or op is None:
        raise lacking or ValueError(words)
    return run_operation(op, args, connect())


def run_operation(op: Operation, args: argparse.Namespace, client: Client) -> int:
    """An operation of the table that has no command of its own: its answer, as JSON (or
    as text). A positional given several times calls it once for each; a body without a
    model is read from the files named."""
    path, params, body = arguments.request(op, args)
    many = next((name for name, value in path.items() if isinstance(value, list)), None)
    calls = [{**path, many: v} for v in path[many]] if many else [path]
    files = getattr(args, "files", None) or ([args.file] if getattr(args, "file", None)
                                             else [])
    bodies = [json.loads(read_text(f)) for f in files] if files else [body]
    for call_path in calls:
        for one in bodies:
            answer = client.call(op, body=one, params=params or None, **call_path)
            print(answer, end="") if isinstance(answer, str) else print_json(answer)
    return 0


def build_parser(operations: Sequence[Operation] = OPERATIONS) -> argparse.ArgumentParser:
    """`cameo` and its commands: `serve`, and one per command word of the table."""
    serve_line = ("serve", "run the service (Ray, executor pool, HTTP API, /metrics)")
    parser = argparse.ArgumentParser(
        prog="cameo", usage="cameo [-h] COMMAND ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the cameo service, and talk to it.\n\ncommands:\n"
                    + arguments.overview(operations, first=[serve_line]),
        epilog="examples:\n" + EXAMPLES + "\n\n" + CONNECTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help=argparse.SUPPRESS)
    client_opts = argparse.ArgumentParser(add_help=False)
    _add_options(client_opts.add_argument_group("service connection"), CLIENT_OPTIONS)

    p = sub.add_parser("serve", help=serve_line[1],
                       description="Run the cameo service. Each flag falls back to the "
                                   "environment variable shown, then to the config file, then "
                                   "to the default. SIGTERM stops it gracefully.")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML file with a [serve] table of these settings (keys as the flags, "
                        "with '_': max_spec_bytes) [env: CAMEO_CONFIG]")
    _add_options(p, SERVE_OPTIONS)
    p.set_defaults(func=cmd_serve)
    for word, rows in commands_of(operations).items():
        arguments.add_command(sub, word, rows, [client_opts], run)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run `cameo ARGS` and exit with its status: 1 when refused (the reason on stderr),
    141 when the output pipe closed (quietly: see `cli.output`)."""
    code: int | str | None
    try:
        try:
            args = build_parser().parse_args(argv)
            code = args.func(args)
        except BrokenPipeError:
            raise
        except (CameoError, OSError) as e:
            print(f"cameo: {e}", file=sys.stderr)
            code = 1
        except SystemExit as e:  # argparse's --help, or its usage error
            code = e.code
        sys.stdout.flush()  # what is still buffered, while a closed pipe can be told
    except BrokenPipeError:
        code = quiet_exit()
    sys.exit(code)
