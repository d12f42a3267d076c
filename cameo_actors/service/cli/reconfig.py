"""The `cameo` commands of live reconfiguration and self-scaling: scale and migrate a
keyed step (waiting for the migration with --wait), the pool's executors, and a dataflow's
own scaling settings and pins. Their arguments come from the operations table
(`cli.arguments`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cameo_actors.runtime.boundary import MigrationInfo
from cameo_actors.service.cli.commands import Command, Connect, given
from cameo_actors.service.cli.output import print_json
from cameo_actors.service.cli.render import (
    drained,
    migration_ended,
    migration_started,
    scaling_changed,
)
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.protocol import DataflowScalingSettings
from cameo_actors.service.verbs import parse_setting

if TYPE_CHECKING:
    from cameo_actors.service.client import Client

#: The settings `cameo scaling set` takes as options of their own (the rest: --setting).
SETTINGS = tuple(DataflowScalingSettings.model_fields)


def _wait_all(client: Client, started: Sequence[MigrationInfo], timeout_s: float) -> int:
    """Wait for each migration to end and say how; 1 if any failed."""
    failed = 0
    for m in started:
        done = client.wait_migration(m["id"], timeout_s=timeout_s)
        print(migration_ended(done))
        failed += done["state"] != "done"
    return 1 if failed else 0


def _wait_removed(client: Client, index: int, timeout_s: float) -> int:
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


def cmd_scale(args: argparse.Namespace, connect: Connect) -> int:
    client = connect()
    m = client.scale(args.name, args.step, args.parallelism,
                     **given(args, "strategy", "batch_bins"))
    print(migration_started(m))
    return _wait_all(client, [m], args.wait_timeout) if args.wait else 0


def cmd_migrate(args: argparse.Namespace, connect: Connect) -> int:
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
    client = connect()
    m = client.migrate(args.name, args.step, **given(args, "bins", "to_instance", "instance",
                                                     "to_executor", "strategy", "batch_bins"))
    print(migration_started(m))
    return _wait_all(client, [m], args.wait_timeout) if args.wait else 0


def cmd_migrations(args: argparse.Namespace, connect: Connect) -> int:
    from cameo_actors.service.view import render_migrations

    rows = connect().migrations(args.name)
    if args.json:
        print_json(rows)  # epoch seconds, for programs
    elif rows:
        print(render_migrations([dict(m) for m in rows]))
    else:
        print("no migrations" + (f" of {args.name}" if args.name else ""))
    return 0


def cmd_pool(args: argparse.Namespace, connect: Connect) -> int:
    """`pool add`, `pool remove INDEX`, `pool drain NODE`, `pool rebalance`."""
    client = connect()
    if args.action == "add":
        if args.arg is not None:
            raise ConfigError("pool add", "no index (use --count N)", args.arg,
                              "cameo pool add --count N")
        added = client.add_executors(**given(args, "count"))
        print(f"executors added: {', '.join(map(str, added))} (`cameo pool rebalance` moves "
              "work onto them)")
        return 0
    if args.action == "remove":
        if getattr(args, "index", None) is None:
            raise ConfigError("pool remove", "an executor index", args.arg,
                              "cameo pool remove INDEX (see `cameo executors`)")
        r = client.remove_executor(args.index, **given(args, "strategy"))
        moving = r.get("moving", [])
        print(f"executor {r.get('executor')}: {r.get('state')}, {len(moving)} instance(s) "
              "move off it (`cameo migrations` shows them)")
        for aid in moving:
            print("  " + aid)
        return _wait_removed(client, args.index, args.wait_timeout) if args.wait else 0
    if args.action == "drain":
        if not getattr(args, "node", None):
            raise ConfigError("pool drain", "a node's address or Ray node id", args.arg,
                              "cameo pool drain NODE (see `cameo executors`)")
        print("\n".join(drained(client.drain_node(args.node))))
        return 0
    if args.arg is not None:
        raise ConfigError("pool rebalance", "no argument", args.arg, "cameo pool rebalance")
    moves = client.rebalance(**given(args, "strategy"))
    print(f"rebalance: {len(moves)} migration(s)" if moves else "rebalance: the pool is even, "
          "nothing moves")
    for m in moves:
        print("  " + migration_started(m))
    return _wait_all(client, moves, args.wait_timeout) if args.wait else 0


# -- self-scaling -------------------------------------------------------------------------------
def scaling_change(args: argparse.Namespace, steps: Sequence[str] | None = None
                   ) -> tuple[dict[str, Any] | None, dict[str, int | None]]:
    """(settings, pins) of `cameo scaling set`: the settings given (None: the pool's), and
    each step pinned or unpinned; --reset unpins `steps` (the dataflow's scalable ones)."""
    settings = dict(parse_setting(t) for t in args.setting or [])
    settings.update(given(args, *SETTINGS))
    if args.reset and settings:
        raise ConfigError("--reset", "no settings with it (it means the pool's settings)",
                          ", ".join(sorted(settings)), "leave out --reset, or the settings")
    pinned: dict[str, int] = dict(args.pin or {})
    pins: dict[str, int | None] = {step: None for step in (steps or []) if args.reset}
    pins.update(pinned)
    for step in args.unpin or []:
        if step in pinned:
            raise ConfigError("--unpin", "a step not pinned in the same command", step,
                              f"either --pin {step}=N or --unpin {step}")
        pins[step] = None
    return settings or None, pins


def cmd_scaling(args: argparse.Namespace, connect: Connect) -> int:
    """`cameo scaling [NAME]` shows the controller's view; `cameo scaling set NAME ...`
    gives a dataflow its own settings and pins."""
    from cameo_actors.service.view import render_scaling

    words = list(args.words)
    changing = bool(given(args, *SETTINGS) or args.setting or args.pin or args.unpin
                    or args.reset)
    if words[:1] == ["set"]:
        if len(words) != 2:
            raise ConfigError("scaling set", "one dataflow name", " ".join(words[1:]) or "none",
                              "cameo scaling set NAME [--policy P] [--pin STEP=N] ...")
        name = words[1]
        client = connect()
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
            print_json(status)
            return 0
        print(scaling_changed(name, settings, pins, status))
        print(render_scaling(status))
        return 0
    if changing:
        raise ConfigError("scaling", "settings and pins only with `cameo scaling set NAME`",
                          " ".join(words) or "no `set`", "cameo scaling set NAME --policy ds2")
    if len(words) > 1:
        raise ConfigError("scaling", "at most one dataflow name", " ".join(words),
                          "cameo scaling [NAME], or cameo scaling set NAME ...")
    status = connect().scaling(words[0] if words else None)
    print_json(status) if args.json else print(render_scaling(status))
    return 0


#: The commands above by verb.
COMMANDS: dict[str, Command] = {
    "scale": cmd_scale, "migrate": cmd_migrate, "migrations": cmd_migrations,
    "pool add": cmd_pool, "pool remove": cmd_pool, "pool drain": cmd_pool,
    "pool rebalance": cmd_pool, "scaling": cmd_scaling, "scaling set": cmd_scaling,
}
