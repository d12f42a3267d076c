"""The benchmarks' tables in the docs, written from the committed JSON of their runs.

Run: `python -m bench.report` (rewrite the tables), `python -m bench.report --check`
(exit 1, naming each table that differs from its JSON: a unit test runs it).

A table lives in a Markdown file between two markers that name its renderer and its
JSON (`bench/results/`, committed with the change that measured it)::

    <!-- table throughput bench/results/throughput.json: python -m bench.report -->
    | ... written by the renderer ... |
    <!-- end table -->

`NAME` is a module of `bench/tables/` (its `table` function) or `MODULE.FUNCTION`, which
turns one benchmark's JSON into the table's lines; the run it came from (commit, date,
machine, command) goes in a line under it. Nothing in a table is typed in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import sys
from collections.abc import Callable
from typing import Any

from bench import tables
from bench.harness.output import REPO

#: The files whose tables are written.
DOCS = ("README.md", "docs/benchmarks.md", "docs/spark.md")
BLOCK = re.compile(r"(<!-- table (?P<name>[a-z_]+(?:\.[a-z_]+)?) (?P<path>\S+\.json): python -m bench.report -->\n)"
                   r"(?P<body>.*?)(<!-- end table -->)", re.S)


def provenance(figures: dict[str, Any], path: str) -> str:
    """The line under a table: which run, on what, by which command, in which file."""
    on = figures.get("measured_on")
    if not on:
        return f"From `{path}`."
    dirty = " (with uncommitted changes)" if on.get("dirty") else ""
    command = " ".join([f"python -m bench.{on['argv'][0].removesuffix('.py')}", *on["argv"][1:]])
    return (f"From `{path}`: `{command}`, commit `{(on.get('commit') or '?')[:10]}`{dirty}, "
            f"{on['date'][:10]}, "
            f"{on['nproc']} cores ({on['cpu_model']}), load average {on['loadavg_1m_end']} "
            "at the end.")


def renderer(name: str) -> Callable[[dict[str, Any]], list[str]]:
    """`bench.tables.MODULE.table` for "MODULE", `bench.tables.MODULE.FN` for "MODULE.FN"."""
    module, _, fn = name.partition(".")
    known = sorted(m.name for m in pkgutil.iter_modules(tables.__path__))
    if module not in known:
        raise SystemExit(f"bench.report: a table names {name!r}, but bench/tables/ has no "
                         f"module {module!r} (one of {known}); fix the marker or add the module")
    found = getattr(importlib.import_module(f"bench.tables.{module}"), fn or "table", None)
    if not callable(found):
        raise SystemExit(f"bench.report: bench/tables/{module}.py has no function "
                         f"{fn or 'table'!r} for the table named {name!r}")
    return found  # type: ignore[no-any-return]


def render(name: str, path: str) -> str:
    """The body of table `name` from the JSON at `path` (relative to the repository)."""
    with open(os.path.join(REPO, path)) as f:
        figures = json.load(f)
    return "\n".join([*renderer(name)(figures), "", provenance(figures, path)]) + "\n"


def rewrite(text: str) -> tuple[str, list[str]]:
    """`text` with every table written from its JSON, and the names of those that changed."""
    changed: list[str] = []

    def one(m: re.Match[str]) -> str:
        body = render(m["name"], m["path"])
        if body != m["body"]:
            changed.append(f"{m['name']} ({m['path']})")
        return m.group(1) + body + m.group(5)
    return BLOCK.sub(one, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from its JSON")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for doc in DOCS:
        path = os.path.join(REPO, doc)
        with open(path) as f:
            text = f.read()
        new, changed = rewrite(text)
        stale += [f"{doc}: {c}" for c in changed]
        if changed and not args.check:
            with open(path, "w") as f:
                f.write(new)
    verb = "differ from their JSON (fix: python -m bench.report)" if args.check else "rewritten"
    for s in stale:
        print(f"{verb}: {s}", file=sys.stderr if args.check else sys.stdout)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
