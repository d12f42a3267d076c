"""The `cameo` command: run the service, and talk to it.

    cameo serve                         # embedded Ray, API on 127.0.0.1:8470
    cameo serve --address 10.0.0.5:6379 # join a Ray cluster
    cameo submit flows.py spec.json     # Dataflow objects of a Python file, or JSON specs
    cameo list
    cameo submit --check spec.json      # would it (and every running one) meet its target?
    cameo status alerts                 # live view; --once for one frame
    cameo status                        # the pool: who misses or will miss, and why
    cameo explain alerts --last 60s     # why it missed its target: its critical path, ranked
    cameo update alerts --target 30
    cameo cancel alerts
    cameo push alerts logs events.jsonl # events from a JSON-lines file (or '-')
    cameo results alerts --follow       # results as they come (committed once printed)
    cameo token create ops              # a token for tenant 'ops' (admin)
    cameo scale alerts win 4 --wait     # a keyed step to 4 instances, live
    cameo migrations                    # reconfigurations and their progress
    cameo pool add --count 2            # more executors (admin); pool rebalance, pool remove
    cameo scaling [alerts]              # parallelism, true rates, decisions and why
    cameo scaling set alerts --policy ds2 --max-parallelism 8 --pin win=4

Client commands find the service at --url / CAMEO_URL (else the one a local
`cameo serve` recorded in RUN_DIR/service/service.json, else 127.0.0.1:8470)
and send the token of --token / CAMEO_TOKEN / --token-file / CAMEO_TOKEN_FILE
(else the local admin token file RUN_DIR/service/admin_token).
"""

from __future__ import annotations

import argparse
import functools
import json
import runpy
import sys
import time
from collections.abc import Iterator
from typing import Any

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.runtime.boundary import STRATEGIES
from cameo_actors.service.config import (
    CLIENT_OPTIONS,
    SERVE_OPTIONS,
    Option,
    option_help,
    resolve_client_config,
    resolve_service_config,
)
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.operations import OPERATIONS, Operation
from cameo_actors.service.view import iso_time


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
    """Exit code 1 when a spec was refused, or with --check when some target would be missed."""
    from cameo_actors.service.view import render_prediction

    client = _client(args)
    failed = 0
    for path in args.files:
        for spec in load_specs(path):
            name = spec.get("name", "?") if isinstance(spec, dict) else "?"
            try:
                if args.check:
                    prediction = client.check(spec)
                    print(f"{name}: " + render_prediction(prediction, new=name))
                    failed += not prediction["feasible"]
                    continue
                r = client.submit(spec, replace=args.replace, use_msgpack=args.msgpack)
            except (CameoError, SpecError) as e:
                print(f"cameo: {name}: refused: {e}", file=sys.stderr)
                failed += 1
                continue
            what = "replaced" if r.get("replaced") else "created" if r["created"] else \
                "unchanged (the same spec runs already)"
            print(f"{r['id']}: {what} (tenant {r['tenant']})")
            for warning in (r.get("admission") or {}).get("warnings", []):
                print(f"cameo: warning: predicted to miss its target: {warning}", file=sys.stderr)
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
    from cameo_actors.service.view import CLEAR, render_prediction, render_status

    client = _client(args)
    if args.name is None:  # the pool
        report = client.overload()
        _print_json(report) if args.json else print(render_prediction(report))
        return 0
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


def render_explanation(e: dict[str, Any]) -> str:
    """An explanation for people: the headline, the ranked lines, and the share within target.

    >>> print(render_explanation({"dataflow": "a", "last_s": 60.0, "results": 10,
    ...     "within_target": 0.9, "latency_target_ms": 50.0,
    ...     "words": ["a: mostly processing", "40% processing in a/map_1 on executor 0"],
    ...     "late_words": ["a: 1 result message over its target; their critical path:",
    ...                    "70% processing in b/map_1 on executor 0 while a/s waited"]}))
    a: mostly processing
      40% processing in a/map_1 on executor 0
    a: 1 result message over its target; their critical path:
      70% processing in b/map_1 on executor 0 while a/s waited
    within target  90.0 %  of 10 traced results (target 50 ms, the last 60 s)
    """
    out = []
    for key in ("words", "late_words"):
        lines = [str(w) for w in e.get(key) or []]
        out += lines[:1] + ["  " + w for w in lines[1:]]
    if not out:
        out.append(f"{e.get('dataflow') or 'the pool'}: nothing traced in the last "
                   f"{e.get('last_s', 0):g} s")
    target = e.get("latency_target_ms")
    window = f"the last {e.get('last_s', 0):g} s"
    share = e.get("within_target")
    out.append(f"within target  {100 * share:.1f} %  of {e.get('results', 0):,} traced results "
               f"({f'target {target:g} ms, ' if target is not None else ''}{window})"
               if share is not None else f"within target  -  (no traced results in {window})")
    return "\n".join(out)


def cmd_explain(args: argparse.Namespace) -> int:
    from cameo_actors.service.protocol import parse_last

    try:
        last_s = parse_last(args.last, "--last")
    except CameoError as e:  # the same check the service makes, before any request
        raise ConfigError("--last", "seconds (60) or with a unit (60s, 500ms, 5m, 1h), up to "
                          "a day", args.last, "e.g. --last 60s") from e
    explanation = _client(args).explain(args.name, last_s=last_s)
    _print_json(explanation) if args.json else print(render_explanation(explanation))
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
    failed = 0
    for name in args.names:
        # One unknown name must not leave the names after it running: try each, report each.
        try:
            r = client.cancel(name)
        except CameoError as e:
            print(f"cameo: {name}: not cancelled: {e}", file=sys.stderr)
            failed += 1
            continue
        if r.get("ended_before"):
            print(f"{r['name']}: {r['state']} already (what it kept is freed)")
        else:
            print(f"{r['name']}: {r['state']} ({r['messages_dropped']} queued messages dropped)")
    if failed and len(args.names) > 1:
        print(f"cameo: {failed} of {len(args.names)} dataflows not cancelled", file=sys.stderr)
    return 1 if failed else 0


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
    got = client.push(args.name, args.source, read_events(args.file), batch_size=args.batch)
    if args.close:
        client.close(args.name)
    print(f"{args.name}/{args.source}: {got.accepted} events pushed, {got.rejected} refused"
          + (", sources closed" if args.close else ""))
    for r in got.rejections:  # the first few; all of them are in the error output
        print(f"  event {r['index']} refused, {r['reason']}", file=sys.stderr)
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    _client(args).close(args.name)
    print(f"{args.name}: sources closed")
    return 0


# -- results ----------------------------------------------------------------------------------
def format_row(row: dict[str, Any], *, errors: bool = False) -> str:
    """One readable line per row: when it left (UTC, to the ms), then the latency and the
    result, or for the error output the step, kind, message and the record.

    >>> format_row({"event": {"n": 1}, "ingest_ms": 1000.0, "egress_ms": 1012.5})
    '1970-01-01T00:00:01.012Z     12.5 ms  {"n": 1}'
    """
    from cameo_actors.service.protocol import json_safe

    event = json.dumps(json_safe(row.get("event")), sort_keys=True, default=repr)
    egress_ms = row.get("egress_ms")
    when = iso_time(None if egress_ms is None else egress_ms / 1000.0, ms=True)
    if errors:
        return f"{when}  {row.get('step')}:{row.get('kind')}  {row.get('message')}  {event}"
    ingest, egress = row.get("ingest_ms"), row.get("egress_ms")
    latency = f"{egress - ingest:7.1f} ms" if ingest is not None and egress is not None else \
        f"{'-':>7} ms"
    return f"{when}  {latency}  {event}"


def cmd_results(args: argparse.Namespace) -> int:
    from cameo_actors.service.outputs import DEFAULT_PAGE
    from cameo_actors.service.protocol import to_json

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit", "a positive number of rows", args.limit,
                          "leave it out to print every row")
    if args.errors and args.sink:
        raise ConfigError("--sink", "no sink with --errors (the error output is one per "
                          "dataflow)", args.sink, "leave out --sink, or --errors")
    rows = _client(args).follow(
        args.name, args.sink, errors=args.errors, commit=not args.no_commit,
        limit=min(args.limit or DEFAULT_PAGE, DEFAULT_PAGE), max_rows=args.limit,
        poll_s=args.interval, until_ended=args.follow, until_caught_up=not args.follow)
    n = 0
    try:
        for row in rows:  # each page is committed once printed (when the next is asked for)
            print(to_json(row).decode() if args.json else format_row(row, errors=args.errors),
                  flush=args.follow)
            n += 1
    except KeyboardInterrupt:  # the page being printed stays uncommitted: read again next time
        pass
    what = "error records" if args.errors else "rows"
    print(f"{args.name}: {n} {what}" + (" (not committed)" if args.no_commit else ""),
          file=sys.stderr)
    return 0


# -- live reconfiguration -----------------------------------------------------------------------
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


def _started(m: dict[str, Any]) -> str:
    what = (f"{m['kind']} {m.get('from_parallelism')} -> {m.get('to_parallelism')} instances"
            if m.get("kind") == "scale" else str(m.get("kind")))
    return (f"{m['dataflow']}/{m['step']}: {what} ({m.get('strategy')}, "
            f"{m.get('bins_total', 0)} bins), migration {m['id']} {m['state']}")


def _ended(m: dict[str, Any]) -> str:
    line = (f"migration {m['id']} ({m['dataflow']}/{m['step']}): {m['state']} in "
            f"{float(m.get('duration_s') or 0.0):.1f} s, {m.get('bins_moved', 0)}/"
            f"{m.get('bins_total', 0)} bins, {m.get('epochs_done', 0)}/"
            f"{m.get('epochs_total', 0)} epochs, {(m.get('bytes_moved') or 0) / 1e6:.2f} MB "
            f"moved, ended {iso_time(m.get('ended_at'))}")
    return line + (f": {m.get('error')}" if m.get("state") == "failed" else "")


def _wait_all(client: Any, started: list[dict[str, Any]], timeout_s: float) -> int:
    """Wait for each migration to end and say how; 1 if any failed."""
    failed = 0
    for m in started:
        done = client.wait_migration(m["id"], timeout_s=timeout_s)
        print(_ended(done))
        failed += done["state"] != "done"
    return 1 if failed else 0


def _wait_removed(client: Any, index: int, timeout_s: float) -> int:
    """Wait until the executor left the pool; 1 if it is still there (a move failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = next((e for e in client.executors() if e.get("executor") == index), None)
        if entry is None or not entry.get("alive", True):
            print(f"executor {index}: removed")
            return 0
        time.sleep(0.5)
    print(f"executor {index}: still in the pool after {timeout_s:g} s; see `cameo migrations`")
    return 1


def cmd_scale(args: argparse.Namespace) -> int:
    client = _client(args)
    m = client.scale(args.name, args.step, args.parallelism, strategy=args.strategy,
                     batch_bins=args.batch_bins)
    print(_started(m))
    return _wait_all(client, [m], args.wait_timeout) if args.wait else 0


def cmd_migrate(args: argparse.Namespace) -> int:
    by_bins = args.bins is not None or args.to_instance is not None
    by_instance = args.instance is not None or args.to_executor is not None
    if by_bins == by_instance or (by_bins and (args.bins is None or args.to_instance is None)) \
            or (by_instance and (args.instance is None or args.to_executor is None)):
        raise ConfigError("migrate", "--bins B --to-instance I, or --instance I --to-executor X",
                          " ".join(a for a, v in (("--bins", args.bins),
                                                  ("--to-instance", args.to_instance),
                                                  ("--instance", args.instance),
                                                  ("--to-executor", args.to_executor))
                                   if v is not None) or "none of them",
                          "move bins to an instance, or an instance to an executor")
    client = _client(args)
    m = client.migrate(args.name, args.step,
                       bins=parse_bins(args.bins) if args.bins is not None else None,
                       to_instance=args.to_instance, instance=args.instance,
                       to_executor=args.to_executor, strategy=args.strategy,
                       batch_bins=args.batch_bins)
    print(_started(m))
    return _wait_all(client, [m], args.wait_timeout) if args.wait else 0


def cmd_migrations(args: argparse.Namespace) -> int:
    from cameo_actors.service.view import render_migrations

    rows = _client(args).migrations(args.name)
    if args.json:
        _print_json(rows)  # epoch seconds, for programs
    elif rows:
        print(render_migrations(rows))
    else:
        print("no migrations" + (f" of {args.name}" if args.name else ""))
    return 0


def cmd_pool(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.action == "add":
        if args.arg is not None:
            raise ConfigError("pool add", "no index (use --count N)", args.arg,
                              "cameo pool add --count N")
        added = client.add_executors(args.count)
        print(f"executors added: {', '.join(map(str, added))} (`cameo pool rebalance` moves "
              "work onto them)")
        return 0
    if args.action == "remove":
        if args.arg is None or not args.arg.isdigit():
            raise ConfigError("pool remove", "an executor index", args.arg,
                              "cameo pool remove INDEX (see `cameo executors`)")
        r = client.remove_executor(int(args.arg), strategy=args.strategy)
        moving = r.get("moving", [])
        print(f"executor {r['executor']}: {r['state']}, {len(moving)} instance(s) move off it "
              "(`cameo migrations` shows them)")
        for aid in moving:
            print("  " + aid)
        return _wait_removed(client, r["executor"], args.wait_timeout) if args.wait else 0
    if args.action == "drain":
        if not args.arg:
            raise ConfigError("pool drain", "a node's address or Ray node id", args.arg,
                              "cameo pool drain NODE (see `cameo executors`)")
        r = client.drain_node(args.arg)
        print(f"node {r['node']} drained in {r['seconds']:.1f} s: executor(s) "
              f"{', '.join(map(str, r['executors']))} retired; "
              f"{len(r['dataflows'])} dataflow(s) restored on the executors left")
        for name in r["dataflows"]:
            print("  " + name)
        for node, why in r.get("ray_refused", {}).items():
            print(f"warning: Ray did not drain node {node} (new executors may start there): {why}")
        return 0
    if args.arg is not None:
        raise ConfigError("pool rebalance", "no argument", args.arg, "cameo pool rebalance")
    moves = client.rebalance(strategy=args.strategy)
    print(f"rebalance: {len(moves)} migration(s)" if moves else "rebalance: the pool is even, "
          "nothing moves")
    for m in moves:
        print("  " + _started(m))
    return _wait_all(client, moves, args.wait_timeout) if args.wait else 0


# -- self-scaling -------------------------------------------------------------------------------
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
    """A scaling setting from the command line: KEY=VALUE, the value read as JSON (a
    number, true, false, null) or else as text.

    >>> parse_setting("target_utilization=0.7"), parse_setting("policy=ds2")
    (('target_utilization', 0.7), ('policy', 'ds2'))
    """
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise ConfigError("--setting", "KEY=VALUE", text, "e.g. --setting target_utilization=0.7")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


#: `cameo scaling set` flags that are settings: (args attribute, setting key).
SCALING_FLAGS = (("policy", "policy"), ("min_parallelism", "min_parallelism"),
                 ("max_parallelism", "max_parallelism"))


def scaling_change(args: argparse.Namespace, steps: list[str] | None = None
                   ) -> tuple[dict[str, Any] | None, dict[str, int | None]]:
    """(settings, pins) of `cameo scaling set`: the settings given (None: the pool's), and
    each step pinned or unpinned; --reset unpins `steps` (the dataflow's scalable ones)."""
    settings = dict(parse_setting(t) for t in args.setting or [])
    settings.update({key: getattr(args, attr) for attr, key in SCALING_FLAGS
                     if getattr(args, attr) is not None})
    if args.reset and settings:
        raise ConfigError("--reset", "no settings with it (it means the pool's settings)",
                          ", ".join(sorted(settings)), "leave out --reset, or the settings")
    pinned = dict(parse_pin(t) for t in args.pin or [])
    pins: dict[str, int | None] = {step: None for step in (steps or []) if args.reset}
    pins.update(pinned)
    for step in args.unpin or []:
        if step in pinned:
            raise ConfigError("--unpin", "a step not pinned in the same command", step,
                              f"either --pin {step}=N or --unpin {step}")
        pins[step] = None
    return settings or None, pins


def cmd_scaling(args: argparse.Namespace) -> int:
    """`cameo scaling [NAME]` shows the controller's view; `cameo scaling set NAME ...`
    gives a dataflow its own settings and pins."""
    from cameo_actors.service.view import render_scaling

    words = list(args.words)
    changing = any(getattr(args, a) is not None for a, _ in SCALING_FLAGS) or bool(
        args.setting or args.pin or args.unpin or args.reset)
    if words[:1] == ["set"]:
        if len(words) != 2:
            raise ConfigError("scaling set", "one dataflow name", " ".join(words[1:]) or "none",
                              "cameo scaling set NAME [--policy P] [--pin STEP=N] ...")
        name = words[1]
        client = _client(args)
        steps = None
        if args.reset:  # unpin every scalable step the controller knows of
            flow = client.scaling(name).get("dataflows", {}).get(name) or {}
            steps = sorted(s for s, st in (flow.get("steps") or {}).items() if st.get("scalable"))
        settings, pins = scaling_change(args, steps)
        if args.reset:  # the pool's settings first: pins alone keep a dataflow's own
            status = client.set_scaling(name, None)
        if settings is not None or pins or not args.reset:
            status = client.set_scaling(name, settings, pin=pins)
        if args.json:
            _print_json(status)
            return 0
        flow = (status.get("dataflows") or {}).get(name) or {}
        print(f"{name}: scaling settings " + ("the pool's" if settings is None else ", ".join(
            f"{k}={v}" for k, v in sorted(settings.items())))
            + (f"; policy {flow['policy']}" if flow.get("policy") else "")
            + "".join(f"; {step} " + ("unpinned" if p is None else f"pinned at {p}")
                      for step, p in sorted(pins.items())))
        print(render_scaling(status))
        return 0
    if changing:
        raise ConfigError("scaling", "settings and pins only with `cameo scaling set NAME`",
                          " ".join(words) or "no `set`", "cameo scaling set NAME --policy ds2")
    if len(words) > 1:
        raise ConfigError("scaling", "at most one dataflow name", " ".join(words),
                          "cameo scaling [NAME], or cameo scaling set NAME ...")
    status = _client(args).scaling(words[0] if words else None)
    _print_json(status) if args.json else print(render_scaling(status))
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
        if args.json:
            _print_json(rows)  # epoch seconds, for programs
        else:  # "created" shows as ISO 8601 (render_table)
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
        r["busy_s"] = round(r.get("busy_ms", 0.0) / 1000.0, 2)
    print(render_table(rows, ["executor", "node", "address", "activations", "backlog", "executed",
                              "busy_s", "overhead_us_per_message", "held", "version", "code"]))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    sys.stdout.write(_client(args).metrics())
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    client = _client(args)
    _print_json({"whoami": client.whoami(), **client.info()})
    return 0


# -- operations without a command of their own ---------------------------------------------------
def _value(text: str) -> Any:
    """A value from the command line: JSON (a number, true, a list) or else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_operation(op: Operation, args: argparse.Namespace) -> int:
    """An operation of the table that has no command of its own: its answer, as JSON."""
    body = {name.removeprefix("body_"): _value(v) for name, v in vars(args).items()
            if name.startswith("body_") and v is not None}
    params = {prm.name: getattr(args, "query_" + prm.name) for prm in op.query_params()
              if getattr(args, "query_" + prm.name) is not None}
    path = {name: getattr(args, name) for name in op.path_names}
    answer = _client(args).call(op, body=body if op.body is not None else None,
                                params=params or None, **path)
    print(answer) if isinstance(answer, str) else _print_json(answer)
    return 0


def add_operation_command(sub: Any, parents: list[argparse.ArgumentParser],
                          op: Operation) -> None:
    """`cameo VERB PATH-PARAMS... [--FIELD VALUE]...` for an operation of the table: its
    path parameters in order, its body's fields and its query parameters as options."""
    p = sub.add_parser(op.cli, parents=parents, help=op.summary or op.name.replace("_", " "))
    for name in op.path_names:
        p.add_argument(name)
    fields = op.body.model.model_fields if op.body is not None and op.body.model else {}
    for name, info in fields.items():
        p.add_argument("--" + name.replace("_", "-"), dest="body_" + name, default=None,
                       metavar="VALUE", help=info.description or "JSON or text")
    for prm in op.query_params():
        p.add_argument("--" + prm.name.replace("_", "-"), dest="query_" + prm.name,
                       default=None, help=prm.bounds.get("description"))
    p.set_defaults(func=functools.partial(cmd_operation, op))


def build_parser(operations: tuple[Operation, ...] = OPERATIONS) -> argparse.ArgumentParser:
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
    p.add_argument("--check", action="store_true",
                   help="start nothing: print whether it, and every running dataflow, is "
                        "predicted to meet its target (exit code 1 if not)")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("list", parents=[client_opts], help="list the dataflows you may see")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("status", parents=[client_opts],
                       help="live view of a dataflow's latency percentiles vs its target; "
                            "without a name, the pool's overload report")
    p.add_argument("name", nargs="?")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (1)")
    p.add_argument("--count", type=int, default=None, help="stop after this many frames")
    p.add_argument("--json", action="store_true", help="print the status as JSON, once")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("explain", parents=[client_opts],
                       help="why a dataflow missed its target: its critical path, ranked; "
                            "without a name, the pool")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--last", default="60s", metavar="WINDOW",
                   help="the window explained: seconds or with a unit (60s, 500ms, 5m); 60s")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=cmd_explain)

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

    p = sub.add_parser("results", parents=[client_opts],
                       help="print a dataflow's results (or error output), committing them",
                       description="Print the results waiting in a dataflow's sink, a page at a "
                                   "time, and commit each page once printed (that frees a sink "
                                   "held on a full result log). Without --follow: what is there "
                                   "now. Ctrl-C leaves the page being printed uncommitted.")
    p.add_argument("name")
    p.add_argument("--sink", default=None, help="the sink (needed when there are several)")
    p.add_argument("--follow", action="store_true",
                   help="keep printing as results come, until the dataflow ended")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per row (NaN and infinities as null)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N rows")
    p.add_argument("--errors", action="store_true",
                   help="the error output (bad records, with step, kind and message)")
    p.add_argument("--no-commit", action="store_true",
                   help="leave the rows for the next reader")
    p.add_argument("--interval", type=float, default=0.5,
                   help="--follow: seconds between polls when nothing is new (0.5)")
    p.set_defaults(func=cmd_results)

    reconfig = argparse.ArgumentParser(add_help=False)
    reconfig.add_argument("--strategy", choices=list(STRATEGIES),
                          default="batched",
                          help="how key bins move: in one epoch, in batches (default), or one "
                               "bin per epoch")
    reconfig.add_argument("--wait", action="store_true",
                          help="wait until the migration(s) ended, and say how")
    reconfig.add_argument("--wait-timeout", type=float, default=120.0, metavar="S",
                          help="--wait: give up after S seconds (120)")
    batch = argparse.ArgumentParser(add_help=False)
    batch.add_argument("--batch-bins", type=int, default=None, metavar="N",
                       help="batched: bins moved per epoch (default: about 8 epochs)")

    p = sub.add_parser("scale", parents=[client_opts, reconfig, batch],
                       help="change a keyed step's parallelism while it runs",
                       description="Scale a keyed step (a window or join after key_by) to P "
                                   "instances while the dataflow runs: its key bins and their "
                                   "state move epoch by epoch, no event is lost.")
    p.add_argument("name")
    p.add_argument("step")
    p.add_argument("parallelism", type=int, metavar="P")
    p.set_defaults(func=cmd_scale)

    p = sub.add_parser("migrate", parents=[client_opts, reconfig, batch],
                       help="move key bins to an instance, or an instance to an executor")
    p.add_argument("name")
    p.add_argument("step")
    p.add_argument("--bins", default=None, metavar="B", help="bins to move: 1,2,3 or 0-63")
    p.add_argument("--to-instance", type=int, default=None, metavar="I",
                   help="the instance that takes the bins")
    p.add_argument("--instance", type=int, default=None, metavar="I", help="the instance to move")
    p.add_argument("--to-executor", type=int, default=None, metavar="X",
                   help="the executor that takes it")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("migrations", parents=[client_opts],
                       help="reconfigurations (running and recent) and their progress")
    p.add_argument("name", nargs="?", default=None, help="only this dataflow's")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_migrations)

    p = sub.add_parser("pool", parents=[client_opts, reconfig],
                       help="add, remove executors or rebalance the pool (admin)",
                       description="cameo pool add [--count N]: start executors. cameo pool "
                                   "remove INDEX: drain an executor (its instances move), then "
                                   "stop it. cameo pool rebalance: even out the executors' load. "
                                   "cameo pool drain NODE: before a node goes, restore its "
                                   "executors' dataflows on the others and stop them.")
    p.add_argument("action", choices=["add", "remove", "rebalance", "drain"])
    p.add_argument("arg", nargs="?", default=None, metavar="INDEX|NODE",
                   help="remove: the executor's index; drain: the node's address or Ray id")
    p.add_argument("--count", type=int, default=1, metavar="N", help="add: executors to start (1)")
    p.set_defaults(func=cmd_pool)

    p = sub.add_parser("scaling", parents=[client_opts],
                       help="the scaling controller: each step's parallelism and true rates, "
                            "its decisions and why; `scaling set NAME` changes a dataflow's",
                       description="cameo scaling [NAME]: per dataflow each step's parallelism, "
                                   "lessees, true processing rate and busy share, the last "
                                   "decisions with their reasons, misses and failed actions. "
                                   "cameo scaling set NAME [--policy P] [--min-parallelism N] "
                                   "[--max-parallelism N] [--pin STEP=N] [--unpin STEP] "
                                   "[--reset]: the dataflow's own settings over the pool's. "
                                   "Each set gives its whole own settings (what it leaves out "
                                   "is the pool's); pins stay until unpinned.")
    p.add_argument("words", nargs="*", metavar="[set] NAME",
                   help="a dataflow (none: the pool); `set NAME` to change its scaling")
    p.add_argument("--policy", default=None, help="set: off, ds2 or threshold")
    p.add_argument("--min-parallelism", type=int, default=None, metavar="N",
                   help="set: fewest instances of each scalable step")
    p.add_argument("--max-parallelism", type=int, default=None, metavar="N",
                   help="set: most instances of each scalable step")
    p.add_argument("--setting", action="append", default=None, metavar="KEY=VALUE",
                   help="set: another setting (warmup_s, scale_down_window_s, "
                        "target_utilization, catch_up_s, high, low, backlog_events, "
                        "deadline_aware, lessees, max_lessees); repeat it")
    p.add_argument("--pin", action="append", default=None, metavar="STEP=N",
                   help="set: keep STEP at N instances whatever the policy says; repeat it")
    p.add_argument("--unpin", action="append", default=None, metavar="STEP",
                   help="set: let the policy decide STEP's parallelism again; repeat it")
    p.add_argument("--reset", action="store_true",
                   help="set: the pool's settings again, and every step unpinned")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=cmd_scaling)

    p = sub.add_parser("token", parents=[client_opts], help="tenant tokens (admin)")
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("arg", nargs="?", help="tenant (create) or token id (revoke)")
    p.add_argument("--json", action="store_true", help="list: print the tokens as JSON")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser("executors", parents=[client_opts], help="executor counters (admin)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_executors)

    p = sub.add_parser("metrics", parents=[client_opts], help="print /metrics")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("info", parents=[client_opts], help="who you are, and the deployment")
    p.set_defaults(func=cmd_info)

    for op in operations:  # a one-word verb no command above has: the generic command
        if op.cli and " " not in op.cli and op.cli not in sub.choices:
            add_operation_command(sub, [client_opts], op)
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
