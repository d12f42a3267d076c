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

`--check` also fails on a figure (a rate, µs, a ratio) in the README or docs/ whose
section names no JSON of `bench/results/` and does not say why it is typed
(`<!-- typed: why -->`), and on a table of docs/benchmarks.md typed in with no such line.
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


#: Where a figure may be: the README and every page of docs/.
FIGURE_PAGES = ("README.md", "docs/*.md")
#: A measured figure, as the docs write one: a rate, a time in µs, a ratio ("2.9x").
FIGURE = re.compile(r"\b\d[\d,.]*(?:-\d[\d,.]*)?\s?(?:k|K|M)?\s?"
                    r"(?:events/s|ev/s|rows/s|events per CPU second|µs\b|x\b)")
_RESULTS = re.compile(r"bench/results/[\w.-]+\.json")


def unbacked_figures(text: str) -> list[str]:
    """The lines of `text` (outside code blocks and generated tables) with a figure, in a
    section (heading to heading) that names no JSON of `bench/results/` that exists and
    says of none why it is typed (`<!-- typed: why -->`): figures nobody can check."""
    found: list[str] = []
    section: list[tuple[int, str]] = []

    def close() -> None:
        body = "\n".join(line for _, line in section)
        named = [p for p in _RESULTS.findall(body) if os.path.exists(os.path.join(REPO, p))]
        if not named and TYPED not in body:
            found.extend(f"line {n}: {line.strip()}" for n, line in section
                         if FIGURE.search(line))

    fenced = generated = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            close()
            section = []
        if line.startswith("<!-- table "):
            generated = True
            section.append((n, line))  # names its JSON
        elif line.startswith("<!-- end table"):
            generated = False
        elif not fenced and not generated and not line.startswith("```"):
            section.append((n, line))
    close()
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
    unbacked = [f"{page.relative_to(REPO)}: {line}" for pattern in FIGURE_PAGES
                for page in sorted(Path(REPO).glob(pattern))
                for line in unbacked_figures(page.read_text())]
    for u in unbacked:
        print(f"a figure that names no JSON: {u} (fix: generate it, name the JSON of "
              f"bench/results/ it comes from in its section, or say why it is typed there: "
              f"{TYPED}why -->)", file=sys.stderr)
    for m in missing:
        print(f"a table's JSON is missing, the table left as it was: {m} (fix: run the command "
              "its section gives, with --json to that path)", file=sys.stderr)
    return 1 if missing or (args.check and (stale or typed or unbacked)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
