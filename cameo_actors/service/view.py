"""Terminal views of the CLI: the status screen and tables (pure text, no I/O).

The status screen shows each latency percentile as a bar on a scale of 0 to
twice the target, with the target marked, so "how close to the deadline" is
visible at a glance:

    p99     61.0 ms  [##############|####          ]  OVER
"""

from __future__ import annotations

import time
from typing import Any

BAR = 30
RED, GREEN, DIM, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[2m", "\x1b[1m", "\x1b[0m"
CLEAR = "\x1b[H\x1b[2J"


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{RESET}" if color else text


def _ms(v: float | None) -> str:
    return "      -   " if v is None else f"{v:8.1f} ms"


def latency_bar(value_ms: float | None, target_ms: float, width: int = BAR) -> str:
    """A bar of `value_ms` on a 0..2x target scale with '|' at the target; '>' past the scale.

    >>> latency_bar(25, 50, 10)
    '[##   |    ] '
    >>> latency_bar(500, 50, 10)
    '[#####|####]>'
    """
    half = width // 2
    if value_ms is None:
        return "[" + " " * half + "|" + " " * (width - half - 1) + "] "
    filled = min(width, round(value_ms / (2 * target_ms) * width)) if target_ms > 0 else width
    left = "".join("#" if i < filled else " " for i in range(half))
    right = "".join("#" if i < filled else " " for i in range(half + 1, width))
    return f"[{left}|{right}]" + (">" if value_ms > 2 * target_ms else " ")


def render_status(s: dict[str, Any], *, color: bool = False, now: float | None = None) -> str:
    """One frame of `cameo status NAME`."""
    target = float(s["latency_target_ms"])
    clock = time.strftime("%H:%M:%S", time.localtime(now if now is not None else time.time()))
    lines = [
        _paint(f"cameo status  {s['name']}  (tenant {s['tenant']})  {s['state']}", BOLD, color)
        + f"    {clock}",
        f"target {target:g} ms   weight {s['weight']:g}   executors "
        f"{','.join(map(str, s['executors'])) or '-'}   sources {', '.join(s['sources']) or '-'}",
        "",
    ]
    lat = s["latency"]
    for q in ("p50", "p95", "p99"):
        v = lat.get(f"{q}_ms")
        verdict = "" if v is None else ("ok" if v <= target else "OVER")
        tag = _paint(verdict, GREEN if verdict == "ok" else RED, color) if verdict else ""
        lines.append(f"  {q}  {_ms(v)}  {latency_bar(v, target)}  {tag}")
    lines.append(f"  max  {_ms(lat.get('max_ms'))}   mean {_ms(lat.get('mean_ms'))}")
    within = s.get("within_target")
    share = "-" if within is None else f"{100 * within:5.1f} %"
    lines.append(f"  within target {share}  of {s['results']:,} results")
    tp = s["throughput"]
    lines.append(f"  throughput  in {tp['events_in_per_s']:,.1f} ev/s   out "
                 f"{tp['events_out_per_s']:,.1f} ev/s   results {tp['results_per_s']:,.1f}/s"
                 + _paint(f"   (over {tp['window_s']:.1f} s)", DIM, color))
    lines.append(f"  events      in {s['events_in']:,}   out {s['events_out']:,}   backlog "
                 f"{s['backlog']:,} messages")
    errors = s.get("errors") or {}
    lines.append("  errors      " + (", ".join(f"{k} {v:,}" for k, v in sorted(errors.items()))
                                     if errors else "none"))
    for f in s.get("failures", [])[-3:]:
        lines.append(_paint(f"  failure     {f}", RED, color))
    return "\n".join(lines)


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain left-aligned table.

    >>> print(render_table([{"a": 1, "b": "x"}], ["a", "b"]))
    a  b
    1  x
    """
    cells = [[str(c) for c in columns]] + [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    if isinstance(v, float):
        return f"{v:g}"
    return "-" if v is None else str(v)
