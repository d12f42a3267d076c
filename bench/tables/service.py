"""`bench.service`'s tables: rates per body format, then isolation and bad input."""

from __future__ import annotations

from typing import Any

from bench.tables import k

FORMATS = (("json", "JSON"), ("msgpack", "msgpack"), ("arrow", "Arrow IPC stream"))


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.service`: one tenant's pushes and results read per second, per body format."""
    lines = ["| body format | events | pushes: events/s | results read: rows/s |",
             "|---|---|---|---|"]
    for fmt, label in FORMATS:
        f = figures["throughput"].get(fmt)
        if f:
            lines.append(f"| {label} | {f['events']:,} | {k(f['pushes_per_s'])} | "
                         f"{k(f['results_read_per_s'])} |")
    return lines


def isolation(figures: dict[str, Any]) -> list[str]:
    """`bench.service`: one tenant's p99 alone and beside a full log; bad input answered."""
    iso, req, ev = (figures["isolation"], figures["bad_input"]["requests"],
                    figures["bad_input"]["events"])
    answers = ", ".join(f"{n} answered {code}" for code, n in sorted(iso["hoarder_answers"].items()))
    harmed = "; ".join(req["harmed"]) or "none"  # each names its dataflow and what changed
    return ["| measured | figure |", "|---|---|",
            f"| one tenant's API calls, p99 alone | {iso['p99_ms_alone']:.1f} ms "
            f"({iso['calls_alone']:,} calls) |",
            f"| the same, beside a tenant whose result log is full | "
            f"{iso['p99_ms_beside_full_log']:.1f} ms ({iso['calls_beside_full_log']:,} calls), "
            f"{iso['p99_ratio']:.2f}x alone |",
            f"| that tenant's pushes meanwhile | {answers} |",
            f"| bad requests answered 4xx | {req['answered_4xx']:,} of {req['tried']:,} "
            f"({len(req['non_4xx'])} answered otherwise) |",
            f"| bad event values in the error output | {ev['in_error_output']} of {ev['tried']} "
            f"({ev['refused_at_the_edge']} refused in the push's answer); "
            f"{ev['good_events_through']} good events beside them through |",
            f"| dataflows harmed | {harmed} |"]
