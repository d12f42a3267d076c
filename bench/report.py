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
from pathlib import Path
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


def rewrite(text: str, missing: list[str] | None = None) -> tuple[str, list[str]]:
    """`text` with every table written from its JSON, and the names of those that changed;
    a table whose JSON is missing is left as it is, and named in `missing`."""
    changed: list[str] = []

    def one(m: re.Match[str]) -> str:
        if not os.path.exists(os.path.join(REPO, m["path"])):
            if missing is not None:
                missing.append(f"{m['name']} ({m['path']})")
            return m.group(0)
        body = render(m["name"], m["path"])
        if body != m["body"]:
            changed.append(f"{m['name']} ({m['path']})")
        return m.group(1) + body + m.group(5)
    return BLOCK.sub(one, text), changed


#: Files whose every table is a figure: each is generated, or says why it is typed.
FIGURE_DOCS = ("docs/benchmarks.md",)
TYPED = "<!-- typed: "
_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def typed_tables(text: str) -> list[str]:
    """The tables of `text` outside the generated blocks with no `<!-- typed: why -->` line
    right above them: figures typed in, which nothing checks."""
    lines = BLOCK.sub(lambda m: m.group(1) + m.group(5), text).split("\n")
    found = []
    for i in range(1, len(lines) - 1):
        starts = lines[i].startswith("|") and not lines[i - 1].startswith("|")
        if starts and _RULE.match(lines[i + 1]) and not lines[i - 1].startswith(TYPED):
            found.append(lines[i].strip())
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from its JSON")
    args = parser.parse_args(argv)
    stale: list[str] = []
    missing: list[str] = []
    for doc in DOCS:
        path = os.path.join(REPO, doc)
        with open(path) as f:
            text = f.read()
        gone: list[str] = []
        new, changed = rewrite(text, gone)
        stale += [f"{doc}: {c}" for c in changed]
        missing += [f"{doc}: {g}" for g in gone]
        if changed and not args.check:
            with open(path, "w") as f:
                f.write(new)
    verb = "differ from their JSON (fix: python -m bench.report)" if args.check else "rewritten"
    for s in stale:
        print(f"{verb}: {s}", file=sys.stderr if args.check else sys.stdout)
    typed = [f"{doc}: {header}" for doc in FIGURE_DOCS
             for header in typed_tables(Path(REPO, doc).read_text())]
    for t in typed:
        print(f"a table typed in, which no JSON backs: {t} (fix: write its benchmark's JSON to "
              f"bench/results/ and a renderer in bench/tables/, or say why it is typed on the "
              f"line above it: {TYPED}why -->)", file=sys.stderr)
    for m in missing:
        print(f"a table's JSON is missing, the table left as it was: {m} (fix: run the command "
              "its section gives, with --json to that path)", file=sys.stderr)
    return 1 if missing or (args.check and (stale or typed)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
