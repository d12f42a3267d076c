"""The `cameo` commands with a behaviour of their own, for dataflows and the service: specs
and events read from files, the live status view, explanations and results for people,
cancelling several dataflows, tokens. Their arguments come from the operations table
(`cli.arguments`); each gets the parsed arguments and a way to connect, and returns the
exit status.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.service.cli.output import CutShort, LineWriter, print_json
from cameo_actors.service.cli.render import (
    cancelled,
    format_row,
    render_explanation,
    submitted,
)
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.outputs import DEFAULT_PAGE
from cameo_actors.service.protocol import parse_last, to_json

if TYPE_CHECKING:  # the client (httpx and all) loads when a command connects
    from cameo_actors.service.client import Client

#: How a command reaches the service: called once it needs to.
Connect = Callable[[], "Client"]
#: A command: the parsed arguments and a way to connect; the exit status.
Command = Callable[[argparse.Namespace, Connect], int]


def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among `names` that were given (the others keep the service's default)."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


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
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(path, "a JSON spec (or a list of specs)", f"invalid JSON: {e}",
                          "fix the file's syntax") from None
    yield from (data if isinstance(data, list) else [data])


def cmd_submit(args: argparse.Namespace, connect: Connect) -> int:
    """Exit status 1 when a spec was refused, or with --check when some target would be
    missed."""
    from cameo_actors.service.view import render_prediction

    client = connect()
    failed = 0
    for path in args.files:
        for spec in load_specs(path):
            name = spec.get("name", "?") if isinstance(spec, dict) else "?"
            try:
                if getattr(args, "check", False):
                    prediction = client.check(spec)
                    print(f"{name}: " + render_prediction(prediction, new=name))
                    failed += not prediction["feasible"]
                    continue
                r = client.submit(spec, replace=bool(args.replace), use_msgpack=args.msgpack)
            except (CameoError, SpecError) as e:
                print(f"cameo: {name}: refused: {e}", file=sys.stderr)
                failed += 1
                continue
            print(submitted(r))
            for warning in (r.get("admission") or {}).get("warnings", []):
                print(f"cameo: warning: predicted to miss its target: {warning}", file=sys.stderr)
    return 1 if failed else 0


# -- list / status / explain ------------------------------------------------------------------
def cmd_list(args: argparse.Namespace, connect: Connect) -> int:
    from cameo_actors.service.view import render_table

    rows: list[dict[str, Any]] = [dict(r) for r in connect().list(args.state,
                                                                   detail=args.detail)]
    columns = ["name", "tenant", "latency_target_ms", "state", "executors"]
    if args.json:
        print_json(rows)
    elif rows:
        if args.detail:  # the figures as columns of their own ("-": ended, or none yet)
            figures = ["p99_ms", "within_target", "events_in_per_s", "backlog"]
            rows = [{**r, **{k: (r.get("figures") or {}).get(k, "-") for k in figures}}
                    for r in rows]
            columns += figures
        print(render_table(rows, columns))
    else:
        print("no dataflows")
    return 0


def cmd_status(args: argparse.Namespace, connect: Connect) -> int:
    from cameo_actors.service.view import CLEAR, render_prediction, render_status

    client = connect()
    if args.name is None:  # the pool
        report = client.overload()
        print_json(report) if args.json else print(render_prediction(report))
        return 0
    if args.json:
        print_json(client.status(args.name))
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


def cmd_explain(args: argparse.Namespace, connect: Connect) -> int:
    try:
        last_s = parse_last(args.last, "--last")
    except CameoError as e:  # the same check the service makes, before any request
        raise ConfigError("--last", "seconds (60) or with a unit (60s, 500ms, 5m, 1h), up to "
                          "a day", args.last, "e.g. --last 60s") from e
    explanation = connect().explain(args.name, last_s=last_s)
    print_json(explanation) if args.json else print(render_explanation(explanation))
    return 0


# -- update / cancel / push / close -----------------------------------------------------------
def cmd_update(args: argparse.Namespace, connect: Connect) -> int:
    if args.latency_target_ms is None and args.weight is None:
        raise ConfigError("update", "--target MS and/or --weight W", "neither",
                          "say what to change")
    r = connect().update(args.name, **given(args, "latency_target_ms", "weight"))
    print(f"{r['name']}: latency target {r['latency_target_ms']:g} ms, weight {r['weight']:g}")
    return 0


def cmd_cancel(args: argparse.Namespace, connect: Connect) -> int:
    client = connect()
    names: list[str] = args.name
    failed = 0
    for name in names:
        # One unknown name must not leave the names after it running: try each, report each.
        try:
            print(cancelled(client.cancel(name)))
        except CameoError as e:
            print(f"cameo: {name}: not cancelled: {e}", file=sys.stderr)
            failed += 1
    if failed and len(names) > 1:
        print(f"cameo: {failed} of {len(names)} dataflows not cancelled", file=sys.stderr)
    return 1 if failed else 0


def read_events(path: str) -> list[dict[str, Any]]:
    """Events from a JSON list or JSON lines (one object per line); '-' is stdin."""
    text = read_text(path)
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            return list(json.loads(stripped))
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ConfigError(path, "a JSON list of events or JSON lines", f"invalid JSON: {e}",
                          "one JSON object per line, or one JSON list") from None


def cmd_push(args: argparse.Namespace, connect: Connect) -> int:
    client = connect()
    got = client.push(args.name, args.source, read_events(args.file), batch_size=args.batch)
    if args.close:
        client.close(args.name)
    print(f"{args.name}/{args.source}: {got.accepted} events pushed, {got.rejected} refused"
          + (", sources closed" if args.close else ""))
    for r in got.rejections:  # the first few; all of them are in the error output
        print(f"  event {r['index']} refused, {r['reason']}", file=sys.stderr)
    return 0


def cmd_close(args: argparse.Namespace, connect: Connect) -> int:
    connect().close(args.name)
    print(f"{args.name}: sources closed")
    return 0


# -- results ----------------------------------------------------------------------------------
def cmd_results(args: argparse.Namespace, connect: Connect) -> int:
    """Pages printed row by row, each committed once all of it is written; when the output
    pipe closes, the rows it took are committed (`paging.commit_first`) and the command
    ends quietly (`CutShort` goes on to `main`)."""
    from cameo_actors.service import paging

    errors = bool(getattr(args, "errors", False))
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit", "a positive number of rows", args.limit,
                          "leave it out to print every row")
    if errors and args.sink:
        raise ConfigError("--sink", "no sink with --errors (the error output is one per "
                          "dataflow)", args.sink, "leave out --sink, or --errors")
    client = connect()
    keep = not args.no_commit
    out = LineWriter()
    try:
        for page in paging.pages(
                client, args.name, args.sink, errors=errors, cursor=args.cursor,
                limit=min(args.limit or DEFAULT_PAGE, DEFAULT_PAGE), max_rows=args.limit,
                poll_s=args.interval, until_ended=args.follow, until_caught_up=not args.follow):
            before = out.written
            try:
                for row in page.rows:
                    out.write(to_json(row).decode() if args.json
                              else format_row(row, errors=errors))
            except CutShort:
                if keep:
                    paging.commit_first(client, args.name, page, out.written - before)
                raise
            if keep and page.rows:
                paging.commit(client, args.name, page)
    except KeyboardInterrupt:  # the page being printed stays uncommitted: read again next time
        pass
    what = "error records" if errors else "rows"
    print(f"{args.name}: {out.written} {what}" + (" (not committed)" if args.no_commit else ""),
          file=sys.stderr)
    return 0


# -- the service ------------------------------------------------------------------------------
def cmd_token(args: argparse.Namespace, connect: Connect) -> int:
    from cameo_actors.service.view import render_table

    client = connect()
    if args.action == "create":
        if not getattr(args, "tenant", None):
            raise ConfigError("token create", "a tenant name", None, "cameo token create TENANT")
        r = client.create_token(args.tenant)
        print(f"token for tenant {r['tenant']} (id {r['id']}; shown once, keep it safe):",
              file=sys.stderr)
        print(r["token"])
    elif args.action == "list":
        rows = client.tokens()
        if args.json:
            print_json(rows)  # epoch seconds, for programs
        else:  # "created" shows as ISO 8601 (render_table)
            print(render_table(rows, ["id", "tenant", "created"]) if rows else "no tenant tokens")
    else:
        if not getattr(args, "token_id", None):
            raise ConfigError("token revoke", "a token id", None, "see `cameo token list`")
        client.revoke_token(args.token_id)
        print(f"token {args.token_id} revoked")
    return 0


def cmd_executors(args: argparse.Namespace, connect: Connect) -> int:
    from cameo_actors.service.view import render_table

    rows = connect().executors()
    if args.json:
        print_json(rows)
        return 0
    print(render_table([{**r, "node": (r.get("node") or "")[:12],
                         "busy_s": round(r.get("busy_ms", 0.0) / 1000.0, 2)} for r in rows],
                       ["executor", "node", "address", "activations", "backlog", "executed",
                        "busy_s", "overhead_us_per_message", "held", "version", "code"]))
    return 0


def cmd_metrics(args: argparse.Namespace, connect: Connect) -> int:
    sys.stdout.write(connect().metrics())
    return 0


def cmd_info(args: argparse.Namespace, connect: Connect) -> int:
    client = connect()
    print_json({"whoami": client.whoami(), **client.info()})
    return 0


#: The commands above by verb; a verb not here prints its answer as JSON.
COMMANDS: dict[str, Command] = {
    "submit": cmd_submit, "submit --check": cmd_submit, "list": cmd_list, "status": cmd_status,
    "explain": cmd_explain, "update": cmd_update, "cancel": cmd_cancel, "push": cmd_push,
    "close": cmd_close, "results": cmd_results, "results --errors": cmd_results,
    "token create": cmd_token, "token list": cmd_token, "token revoke": cmd_token,
    "executors": cmd_executors, "metrics": cmd_metrics, "info": cmd_info,
}
