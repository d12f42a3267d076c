"""The `cameo` command: run the service, and talk to it.

    cameo serve                         # embedded Ray, API on 127.0.0.1:8470
    cameo serve --address 10.0.0.5:6379 # join a Ray cluster
    cameo submit flows.py spec.json     # Dataflow objects of a Python file, or JSON specs
    cameo list
    cameo status alerts                 # live view; --once for one frame
    cameo update alerts --target 30
    cameo cancel alerts
    cameo push alerts logs events.jsonl # events from a JSON-lines file (or '-')
    cameo token create ops              # a token for tenant 'ops' (admin)

Client commands find the service at --url / CAMEO_URL (else the one a local
`cameo serve` recorded in RUN_DIR/service/service.json, else 127.0.0.1:8470)
and send the token of --token / CAMEO_TOKEN / --token-file / CAMEO_TOKEN_FILE
(else the local admin token file RUN_DIR/service/admin_token).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
from collections.abc import Iterator
from typing import Any

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.service.config import (
    CLIENT_OPTIONS,
    SERVE_OPTIONS,
    Option,
    option_help,
    resolve_client_config,
    resolve_service_config,
)
from cameo_actors.service.errors import ConfigError


def _add_options(p: Any, options: tuple[Option, ...]) -> None:
    """Add an option table's flags to a parser or argument group (defaults None, so the
    environment and the config file can fill in)."""
    for o in options:
        kwargs: dict[str, Any] = {"dest": o.name, "help": option_help(o), "default": None,
                                  "metavar": o.metavar or o.name.upper()}
        if o.repeat:
            kwargs["action"] = "append"
        p.add_argument(o.flag, **kwargs)


def _client(args: argparse.Namespace) -> Any:
    from cameo_actors.service.client import Client

    cfg = resolve_client_config({o.name: getattr(args, o.name, None) for o in CLIENT_OPTIONS})
    return Client.from_config(cfg)


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


# -- serve ------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from cameo_actors.service.server import serve

    flags = {o.name: getattr(args, o.name) for o in SERVE_OPTIONS}
    flags["config"] = args.config
    return serve(resolve_service_config(flags))


# -- submit -----------------------------------------------------------------------------------
def load_specs(path: str) -> Iterator[dict[str, Any]]:
    """Spec dicts from a JSON file (a spec or a list of specs), '-' (stdin), or a Python
    file whose top level defines `Dataflow` / `DataflowSpec` objects (or lists of them)."""
    if path.endswith(".py"):
        found: list[Any] = []
        for value in runpy.run_path(path, run_name="__cameo_submit__").values():
            items = value if isinstance(value, (list, tuple)) else [value]
            found.extend(v for v in items if isinstance(v, (Dataflow, DataflowSpec))
                         and all(v is not f for f in found))
        if not found:
            raise ConfigError(path, "Dataflow objects at the top level of the file",
                              "none", "assign each Dataflow(...) to a module-level name")
        for d in found:
            yield d.spec.to_dict() if isinstance(d, Dataflow) else d.to_dict()
        return
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(path, "a JSON spec (or a list of specs)", f"invalid JSON: {e}",
                          "fix the file's syntax") from None
    yield from (data if isinstance(data, list) else [data])


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    failed = 0
    for path in args.files:
        for spec in load_specs(path):
            name = spec.get("name", "?") if isinstance(spec, dict) else "?"
            try:
                r = client.submit(spec, replace=args.replace, use_msgpack=args.msgpack)
            except (CameoError, SpecError) as e:
                print(f"cameo: {name}: refused: {e}", file=sys.stderr)
                failed += 1
                continue
            what = "replaced" if r.get("replaced") else "created" if r["created"] else \
                "unchanged (the same spec runs already)"
            print(f"{r['id']}: {what} (tenant {r['tenant']})")
    return 1 if failed else 0


# -- list / status ----------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from cameo_actors.service.view import render_table

    rows = _client(args).list()
    if args.json:
        _print_json(rows)
    elif rows:
        print(render_table(rows, ["name", "tenant", "latency_target_ms", "state", "executors"]))
    else:
        print("no dataflows")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from cameo_actors.service.view import CLEAR, render_status

    client = _client(args)
    if args.json:
        _print_json(client.status(args.name))
        return 0
    live = sys.stdout.isatty() and not args.once
    frames = 1 if args.once else args.count
    shown = 0
    try:
        while frames is None or shown < frames:
            frame = render_status(client.status(args.name), color=live)
            if live:
                sys.stdout.write(CLEAR + frame + "\n\n(Ctrl-C to quit)\n")
            else:
                sys.stdout.write(("\n" if shown else "") + frame + "\n")
            sys.stdout.flush()
            shown += 1
            if frames is None or shown < frames:
                time.sleep(args.interval)
    except KeyboardInterrupt:
        print()
    return 0


# -- update / cancel / push / close -----------------------------------------------------------
def cmd_update(args: argparse.Namespace) -> int:
    if args.target is None and args.weight is None:
        raise ConfigError("update", "--target MS and/or --weight W", "neither",
                          "say what to change")
    r = _client(args).update(args.name, latency_target_ms=args.target, weight=args.weight)
    print(f"{r['name']}: latency target {r['latency_target_ms']:g} ms, weight {r['weight']:g}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    client = _client(args)
    for name in args.names:
        r = client.cancel(name)
        print(f"{r['name']}: {r['state']} ({r['messages_dropped']} queued messages dropped)")
    return 0


def read_events(path: str) -> list[dict[str, Any]]:
    """Events from a JSON list or JSON lines (one object per line); '-' is stdin."""
    text = _read_text(path)
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            return list(json.loads(stripped))
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ConfigError(path, "a JSON list of events or JSON lines", f"invalid JSON: {e}",
                          "one JSON object per line, or one JSON list") from None


def cmd_push(args: argparse.Namespace) -> int:
    client = _client(args)
    n = client.push(args.name, args.source, read_events(args.file), batch_size=args.batch)
    if args.close:
        client.close(args.name)
    print(f"{args.name}/{args.source}: {n} events pushed" + (", sources closed" if args.close else ""))
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    _client(args).close(args.name)
    print(f"{args.name}: sources closed")
    return 0


# -- service ----------------------------------------------------------------------------------
def cmd_token(args: argparse.Namespace) -> int:
    from cameo_actors.service.view import render_table

    client = _client(args)
    if args.action == "create":
        if not args.arg:
            raise ConfigError("token create", "a tenant name", None, "cameo token create TENANT")
        r = client.create_token(args.arg)
        print(f"token for tenant {r['tenant']} (id {r['id']}; shown once, keep it safe):",
              file=sys.stderr)
        print(r["token"])
    elif args.action == "list":
        rows = client.tokens()
        print(render_table(rows, ["id", "tenant", "created"]) if rows else "no tenant tokens")
    else:
        if not args.arg:
            raise ConfigError("token revoke", "a token id", None, "see `cameo token list`")
        client.revoke_token(args.arg)
        print(f"token {args.arg} revoked")
    return 0


def cmd_executors(args: argparse.Namespace) -> int:
    from cameo_actors.service.view import render_table

    rows = _client(args).executors()
    if args.json:
        _print_json(rows)
        return 0
    for r in rows:
        r["node"] = (r.get("node") or "")[:12]
        r["busy_s"] = round(r["busy_ms"] / 1000.0, 2)
    print(render_table(rows, ["executor", "node", "activations", "backlog", "executed",
                              "busy_s", "overhead_us_per_message", "held"]))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    sys.stdout.write(_client(args).metrics())
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    client = _client(args)
    _print_json({"whoami": client.whoami(), **client.info()})
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cameo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    client_opts = argparse.ArgumentParser(add_help=False)
    _add_options(client_opts.add_argument_group("service connection"), CLIENT_OPTIONS)

    p = sub.add_parser("serve", help="run the service (Ray, executor pool, RPC API, /metrics)",
                       description="Run the cameo service. Each flag falls back to the "
                                   "environment variable shown, then to the config file, then "
                                   "to the default. SIGTERM stops it gracefully.")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="TOML file with a [serve] table of these settings (keys as the flags, "
                        "with '_': max_spec_bytes) [env: CAMEO_CONFIG]")
    _add_options(p, SERVE_OPTIONS)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("submit", parents=[client_opts], help="submit dataflows (idempotent)")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a JSON spec (or list of specs), '-' for stdin, or a Python file whose "
                        "top level defines Dataflow objects")
    p.add_argument("--replace", action="store_true",
                   help="replace a running dataflow of the same name whose spec differs")
    p.add_argument("--msgpack", action="store_true", help="send the spec as msgpack")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("list", parents=[client_opts], help="list the dataflows you may see")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("status", parents=[client_opts],
                       help="live view of a dataflow's latency percentiles vs its target")
    p.add_argument("name")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (1)")
    p.add_argument("--count", type=int, default=None, help="stop after this many frames")
    p.add_argument("--json", action="store_true", help="print the status as JSON, once")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("update", parents=[client_opts],
                       help="change a running dataflow's latency target or weight")
    p.add_argument("name")
    p.add_argument("--target", type=float, default=None, metavar="MS", help="new latency target")
    p.add_argument("--weight", type=float, default=None, help="new tenant weight (fair_share)")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("cancel", parents=[client_opts], help="cancel dataflows")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("push", parents=[client_opts], help="push events to a source")
    p.add_argument("name")
    p.add_argument("source")
    p.add_argument("file", help="JSON lines or a JSON list of events; '-' for stdin")
    p.add_argument("--batch", type=int, default=5000, help="events per request (5000)")
    p.add_argument("--close", action="store_true", help="close the sources afterwards")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser("close", parents=[client_opts], help="end a dataflow's sources")
    p.add_argument("name")
    p.set_defaults(func=cmd_close)

    p = sub.add_parser("token", parents=[client_opts], help="tenant tokens (admin)")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("arg", nargs="?", help="tenant (create) or token id (revoke)")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser("executors", parents=[client_opts], help="executor counters (admin)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_executors)

    p = sub.add_parser("metrics", parents=[client_opts], help="print /metrics")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("info", parents=[client_opts], help="who you are, and the deployment")
    p.set_defaults(func=cmd_info)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except (CameoError, OSError) as e:
        print(f"cameo: {e}", file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
