"""The benchmarks' tables in the docs, written from the committed JSON of their runs.

Run: `python -m bench.report` (rewrite the tables), `python -m bench.report --check`
(exit 1, naming each table that differs from its JSON: a unit test runs it).

A table lives in a Markdown file between two markers that name its renderer and its
JSON (`bench/results/`, committed with the change that measured it)::

    <!-- table throughput bench/results/throughput.json: python -m bench.report -->
    | ... written by the renderer ... |
    <!-- end table -->

Each renderer below turns one benchmark's JSON into its table, the run it came from
(commit, date, machine, command) in a line under it; nothing in a table is typed in.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from bench.harness.output import REPO

#: The files whose tables are written.
DOCS = ("README.md", "docs/benchmarks.md")
BLOCK = re.compile(r"(<!-- table (?P<name>[a-z_]+) (?P<path>\S+\.json): python -m bench.report -->\n)"
                   r"(?P<body>.*?)(<!-- end table -->)", re.S)


def k(v: float | None) -> str:
    """Events/s as thousands: 1,234 K ("" when not measured)."""
    return "" if v is None else f"{v / 1e3:,.0f} K"


def ratio(a: float | None, b: float | None) -> str:
    return "" if not a or not b else f"{a / b:.1f}x"


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


THROUGHPUT_ROWS = (  # (label, rows arm, Arrow arm, cores the arm reserves)
    ("operators alone, in-process (`run_local`)", "operators", None, 1),
    ("one executor core, in-process (no Ray)", "executor_core", "executor_core_arrow", 1),
    ("Ray, 1 executor, end to end (driver pushing)", "ray_x1", "ray_x1_arrow", 1),
    ("Ray, 2 executors, end to end (parallelism 2)", "ray_x2", "ray_x2_arrow", 2),
    ("Ray, 1 executor, per second of executor busy time", "ray_x1_busy", "ray_x1_arrow_busy", 1),
    ("Ray, 2 executors, per second of executor busy time", "ray_x2_busy", "ray_x2_arrow_busy", 1),
)


def throughput(figures: dict[str, Any]) -> list[str]:
    """`bench.throughput`: events/s of each arm, rows and Arrow; the Ray arms also per CPU
    second of every process (what carries to a cluster)."""
    def cell(arm: str | None, field: str = "events_per_s") -> float | None:
        return figures[arm].get(field) if arm and arm in figures else None

    lines = ["| measured | rows: events/s | Arrow: events/s | Arrow / rows |",
             "|---|---|---|---|"]
    for label, rows, arrow, _ in THROUGHPUT_ROWS:
        lines.append(f"| {label} | {k(cell(rows))} | {k(cell(arrow))} | "
                     f"{ratio(cell(arrow), cell(rows))} |")
    for label, rows, arrow, _ in THROUGHPUT_ROWS[2:4]:
        per_cpu = label.replace("end to end (driver pushing)", "").replace(
            "end to end (parallelism 2)", "").rstrip(", ")
        lines.append(f"| {per_cpu}, per CPU second of every process | "
                     f"{k(cell(rows, 'events_per_cpu_s'))} | {k(cell(arrow, 'events_per_cpu_s'))} | "
                     f"{ratio(cell(arrow, 'events_per_cpu_s'), cell(rows, 'events_per_cpu_s'))} |")
    return lines


NEXMARK_NAMES = {"q0": "Q0 passthrough", "q1": "Q1 currency", "q2": "Q2 selection",
                 "q3": "Q3 local items", "q4": "Q4 avg by category", "q5": "Q5 hot items",
                 "q6": "Q6 avg by seller", "q7": "Q7 highest bid", "q8": "Q8 new users",
                 "q11": "Q11 sessions"}
NEXMARK_MODES = (("in-process", "in_process"), ("Ray, rows", "ray"),
                 ("rows, busy", "ray_busy"), ("rows, per CPU s", "ray_cpu"),
                 ("Ray, Arrow", "ray_arrow"), ("Arrow, busy", "ray_arrow_busy"),
                 ("Arrow, per CPU s", "ray_arrow_cpu"))


def nexmark(figures: dict[str, Any]) -> list[str]:
    """`bench.nexmark`: events/s per query and mode, beside the peers' published figures."""
    peers = {p: figures["peers"][p]["per_core_eps"] for p in ("flink-1.13", "dbsp")}
    head = [label for label, _ in NEXMARK_MODES]
    lines = ["| query | " + " | ".join(head) + " | Flink 1.13 | DBSP |",
             "|---|" + "---|" * (len(head) + 2)]
    for q, fig in figures["queries"].items():
        cells = [k(fig[mode]["per_core"]) if mode in fig else "" for _, mode in NEXMARK_MODES]
        lines.append(f"| {NEXMARK_NAMES.get(q, q)} | " + " | ".join(cells) +
                     f" | {k(peers['flink-1.13'].get(q))} | {k(peers['dbsp'].get(q))} |")
    return lines


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "throughput": throughput, "nexmark": nexmark}


def render(name: str, path: str) -> str:
    """The body of table `name` from the JSON at `path` (relative to the repository)."""
    if name not in RENDERERS:
        raise SystemExit(f"bench.report: no renderer named {name!r}; one of {sorted(RENDERERS)}")
    with open(os.path.join(REPO, path)) as f:
        figures = json.load(f)
    return "\n".join([*RENDERERS[name](figures), "", provenance(figures, path)]) + "\n"


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
