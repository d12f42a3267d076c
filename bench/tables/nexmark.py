"""`bench.nexmark`'s table, beside the peers' published figures."""

from __future__ import annotations

from typing import Any

from bench.tables import k, per_event

NAMES = {"q0": "Q0 passthrough", "q1": "Q1 currency", "q2": "Q2 selection",
         "q3": "Q3 local items", "q4": "Q4 avg by category", "q5": "Q5 hot items",
         "q6": "Q6 avg by seller", "q7": "Q7 highest bid", "q8": "Q8 new users",
         "q11": "Q11 sessions"}
MODES = (("in-process", "in_process"), ("Ray, rows", "ray"),
         ("rows, per worker CPU s", "ray_busy"), ("rows, per CPU s", "ray_cpu"),
         ("Ray, Arrow", "ray_arrow"), ("Arrow, per worker CPU s", "ray_arrow_busy"),
         ("Arrow, per CPU s", "ray_arrow_cpu"))


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.nexmark`: events/s per query and mode, beside the peers' published figures."""
    peers = {p: figures["peers"][p]["per_core_eps"] for p in ("flink-1.13", "dbsp")}
    head = [label for label, _ in MODES]
    lines = ["| query | " + " | ".join(head) + " | Flink 1.13 | DBSP |",
             "|---|" + "---|" * (len(head) + 2)]
    for q, fig in figures["queries"].items():
        cells = [k(fig[mode]["per_core"]) if mode in fig else "" for _, mode in MODES]
        lines.append(f"| {NAMES.get(q, q)} | " + " | ".join(cells) +
                     f" | {k(peers['flink-1.13'].get(q))} | {k(peers['dbsp'].get(q))} |")
    return lines


def findings(figures: dict[str, Any]) -> list[str]:
    """What the table says, computed: the results checked, where Arrow gains least, and
    the queries below Flink's published figure per CPU second of every process."""
    queries = figures["queries"]
    checked = all(q.get("checked") for q in queries.values())
    gain = sorted((q["ray_arrow_cpu"]["per_core"] / q["ray_cpu"]["per_core"], NAMES.get(n, n))
                  for n, q in queries.items() if "ray_arrow_cpu" in q and "ray_cpu" in q)
    flink = figures["peers"]["flink-1.13"]["per_core_eps"]
    below = [NAMES.get(n, n).split()[0] for n, q in queries.items()
             if n in flink and "ray_arrow_cpu" in q and q["ray_arrow_cpu"]["per_core"] < flink[n]]
    least = ", ".join(f"{name.split()[0]} ({x:.1f}x)" for x, name in gain[:3])
    return [f"- Every run's results {'equal' if checked else 'were NOT all checked against'} "
            "the DuckDB reference.",
            f"- Arrow over rows, per CPU second of every process: least for {least} (a step "
            "with no column kernel, such as a join or a `process` function, runs per row).",
            "- Per CPU second of every process, fed Arrow, below Flink 1.13's published figure "
            f"per core: {', '.join(below) or 'none'} (the setups differ: below)."]


def scale_out(figures: dict[str, Any]) -> list[str]:
    """The queries run on 1, 2 and 4 executors (parallelism 1, 2, 4): CPU µs per event of
    every process of the run, rows and Arrow; in brackets, events per CPU second against
    one executor's, and the cores the run kept busy (its CPU over its wall time)."""
    arms = sorted({arm for q in figures["queries"].values() for arm in q.get("cpu", {})
                   if "@" not in arm},  # (other state backends: `backends`)
                  key=lambda a: (a.endswith("_arrow"), int(a[5:].split("_")[0])))
    if not arms:
        return ["(no run on more than one executor in this file)"]
    def label(arm: str) -> str:
        n = int(arm[5:].split("_")[0])
        return f"{'Arrow' if arm.endswith('_arrow') else 'rows'}, {n} executor{'s' if n > 1 else ''}"
    lines = ["| query | " + " | ".join(label(a) for a in arms) + " |",
             "|---|" + "---|" * len(arms)]
    for q, fig in figures["queries"].items():
        cpu = fig.get("cpu", {})
        if not any(a in cpu for a in arms if not a.startswith("ray_x1")):
            continue
        cells = []
        for arm in arms:
            got = per_event(cpu.get(arm))
            one = per_event(cpu.get("ray_x1_arrow" if arm.endswith("_arrow") else "ray_x1"))
            if got is None:
                cells.append("")
                continue
            vs = "" if arm.startswith("ray_x1") or one is None else f"{got[0] / one[0]:.2f}x; "
            cores = "" if got[2] is None else f"{got[2]:.1f} cores"
            cells.append(f"{got[1]:.1f} ({vs}{cores})" if vs or cores else f"{got[1]:.1f}")
        lines.append(f"| {NAMES.get(q, q)} | " + " | ".join(cells) + " |")
    return lines


def backends(figures: dict[str, Any]) -> list[str]:
    """`--state-backends memory,rocksdb`: per query, events per CPU second of every process
    on one executor, rows and Arrow, with the state in memory and in each other backend
    (its ratio to memory's in brackets)."""
    others = [b for b in figures.get("state_backends", ["memory"]) if b != "memory"]
    if not others:
        return ["(every run of this file kept its state in memory)"]
    head = [f"{kind}, {b}" for kind in ("rows", "Arrow") for b in ("memory", *others)]
    lines = ["| query | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for q, fig in figures["queries"].items():
        cells = []
        for mode in ("ray_cpu", "ray_arrow_cpu"):
            base = fig.get(mode, {}).get("per_core")
            cells.append(k(base))
            for b in others:
                got = fig.get(f"{mode}@{b}", {}).get("per_core")
                ratio = f" ({got / base:.2f}x)" if got and base else ""
                cells.append(k(got) + ratio)
        lines.append(f"| {NAMES.get(q, q)} | " + " | ".join(cells) + " |")
    return lines
