"""Terminal views of the CLI: the status screen and tables (pure text, no I/O).

The status screen shows each latency percentile as a bar on a scale of 0 to
twice the target, with the target marked, so "how close to the deadline" is
visible at a glance:

    p99     61.0 ms  [##############|####          ]  OVER
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

BAR = 30
RED, GREEN, DIM, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[2m", "\x1b[1m", "\x1b[0m"
CLEAR = "\x1b[H\x1b[2J"
#: Table columns that hold epoch seconds (besides any "*_at"): shown as ISO 8601.
TIME_COLUMNS = frozenset({"created"})


def iso_time(epoch_s: float | None, *, ms: bool = False) -> str:
    """Epoch seconds as ISO 8601 in UTC, to the second (or the millisecond): how every
    human output shows a time (JSON outputs keep the number).

    >>> iso_time(1_700_000_000.7), iso_time(1_700_000_000.7, ms=True)
    ('2023-11-14T22:13:20Z', '2023-11-14T22:13:20.700Z')
    >>> iso_time(None)
    '-'
    """
    if epoch_s is None:
        return "-"
    when = datetime.fromtimestamp(epoch_s, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z") if ms \
        else when.strftime("%Y-%m-%dT%H:%M:%SZ")


class UtcIsoFormatter(logging.Formatter):
    """The service log's times as ISO 8601 in UTC, like `iso_time`, to the millisecond.

    >>> f = UtcIsoFormatter("%(asctime)s %(message)s")
    >>> f.format(logging.makeLogRecord({"msg": "up", "created": 0.25, "msecs": 250.0}))
    '1970-01-01T00:00:00.250Z up'
    """

    @staticmethod
    def converter(secs: float | None = None) -> time.struct_time:
        return time.gmtime(secs)

    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


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
    clock = iso_time(now if now is not None else time.time())
    lines = [
        _paint(f"cameo status  {s['name']}  (tenant {s['tenant']})  {s['state']}", BOLD, color)
        + f"    {clock}",
        f"target {target:g} ms   weight {s['weight']:g}   executors "
        f"{','.join(map(str, s['executors'])) or '-'}   sources {', '.join(s['sources']) or '-'}"
        f"   submitted {iso_time(s.get('submitted_at'))}",
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
    outlook = s.get("outlook")
    if outlook and outlook["verdict"] != "meets":
        lines.append(_paint(f"  outlook     {outlook['verdict']}: {outlook['reason']}",
                            RED if outlook["verdict"] == "misses" else BOLD, color))
    scaling = s.get("scaling")
    if scaling:
        lines += ["", f"  scaling     policy {scaling.get('policy', '-')}"]
        for step, st in sorted((scaling.get("steps") or {}).items()):
            if st.get("scalable"):
                lines.append(f"    {step}  {step_line(st)}")
        for d in (scaling.get("decisions") or [])[-1:]:
            lines.append(f"    last decision  {decision_line(d, dataflow=False)}")
        for reason in scaling.get("misses") or []:
            lines.append(_paint(f"    will miss  {reason}", RED, color))
        for e in (scaling.get("errors") or [])[-1:]:
            lines.append(_paint(f"    failed  {iso_time(e.get('at'))}  {e.get('error')}", RED,
                                color))
    connectors = s.get("connectors") or {}
    if connectors:
        lines += ["", "  kafka"]
        for instance, c in sorted(connectors.items()):
            if "partitions" in c:
                lag = sum(p["lag"] for p in c["partitions"].values())
                what = f"reads {len(c['partitions'])} partition(s), lag {lag:,} records"
            else:
                what = f"wrote {c.get('written', 0):,} rows, log offset {c.get('position', 0):,}"
            if c.get("failures"):
                what += f", {c['failures']:,} failed and tried again"
            line = f"    {instance}  {c['state']}  {what}"
            lines.append(_paint(line + f"  ({c['error']})", RED, color) if c.get("error")
                         else line)
    migrations = s.get("migrations") or []
    if migrations:
        lines += ["", "  migrations"]
        lines += ["    " + line for line in render_migrations(migrations).splitlines()]
    return "\n".join(lines)


def render_prediction(p: dict[str, Any], *, new: str | None = None) -> str:
    """Admission control's prediction, or the pool's overload report, in words.

    >>> print(render_prediction({"feasible": True, "capacity_ms_per_s": 2000.0,
    ...     "utilization": 0.25, "causes": [], "executors_needed": 1, "max_rate_eps": None,
    ...     "outcomes": [{"name": "a", "tenant": "t", "verdict": "meets",
    ...                   "reason": "gets the 500 ms/s of executor time it needs"}]}))
    every target is predicted to be met (pool at 25% of 2,000 ms/s)
      a (tenant t): meets: gets the 500 ms/s of executor time it needs
    """
    load = "-" if p.get("utilization") is None else f"{100 * p['utilization']:.0f}%"
    pool = f"pool at {load} of {p['capacity_ms_per_s']:,.0f} ms/s"
    head = (f"every target is predicted to be met ({pool})" if p["feasible"] else
            f"some targets are predicted to be missed ({pool})")
    lines = [head]
    if p.get("capacity_basis"):
        lines.append(f"  capacity: {p['capacity_basis']}")
    for o in p["outcomes"]:
        mark = " (new)" if new is not None and o["name"] == new else ""
        lines.append(f"  {o['name']}{mark} (tenant {o['tenant']}): {o['verdict']}: {o['reason']}")
    if p["causes"]:
        lines.append("  load above the weighted share: " + ", ".join(
            f"{c['tenant']} {c['over_share_ms_per_s']:,.0f} ms/s" for c in p["causes"]))
    if not p["feasible"] and p.get("executors_needed"):
        lines.append(f"  needed: about {p['executors_needed']} executors")
    if new is not None and p.get("max_rate_eps") is not None:
        lines.append(f"  {new} fits at up to {p['max_rate_eps']:,.0f} events/s")
    return "\n".join(lines)


#: The columns of `cameo migrations` (and of the migrations in `cameo status`).
MIGRATION_COLUMNS = ["id", "dataflow", "step", "kind", "strategy", "state", "bins", "epochs",
                     "mb_moved", "duration_s", "started_at"]


def migration_row(m: dict[str, Any]) -> dict[str, Any]:
    """One reconfiguration as a table row: bins and epochs as done/total, MB moved,
    the parallelism change in its kind.

    >>> r = migration_row({"id": "m1", "dataflow": "a", "step": "w", "kind": "scale",
    ...                    "strategy": "fluid", "state": "done", "from_parallelism": 2,
    ...                    "to_parallelism": 4, "bins_total": 4096, "bins_moved": 2048,
    ...                    "epochs_total": 2048, "epochs_done": 2048, "bytes_moved": 1_500_000,
    ...                    "duration_s": 3.25, "started_at": 0.0})
    >>> r["kind"], r["bins"], r["epochs"], r["mb_moved"], r["duration_s"]
    ('scale 2->4', '2048/4096', '2048/2048', '1.50', '3.2')
    """
    kind = str(m.get("kind") or "-")
    if kind == "scale":
        kind += f" {m.get('from_parallelism', '?')}->{m.get('to_parallelism', '?')}"
    return {
        **{k: m.get(k) for k in ("id", "dataflow", "step", "strategy", "state", "started_at")},
        "kind": kind,
        "bins": f"{m.get('bins_moved', 0)}/{m.get('bins_total', 0)}",
        "epochs": f"{m.get('epochs_done', 0)}/{m.get('epochs_total', 0)}",
        "mb_moved": f"{(m.get('bytes_moved') or 0) / 1e6:.2f}",
        "duration_s": f"{float(m.get('duration_s') or 0.0):.1f}",
    }


def render_migrations(migrations: list[dict[str, Any]]) -> str:
    """The table of `cameo migrations`, then why each failed one failed."""
    text = render_table([migration_row(m) for m in migrations], MIGRATION_COLUMNS)
    failed = [f"{m.get('id')}: failed: {m.get('error') or 'no cause given'}"
              for m in migrations if m.get("state") == "failed"]
    return "\n".join([text, *failed])


# -- the scaling controller (`cameo scaling`) ---------------------------------------------------
#: Columns of a dataflow's steps in `cameo scaling`.
SCALING_COLUMNS = ["step", "parallelism", "lessees", "true_eps", "busy", "in_eps", "out_eps",
                   "backlog"]
#: Decisions `cameo scaling` shows per dataflow (the most recent).
SCALING_DECISIONS_SHOWN = 10


def _rate(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v:,.0f}" if abs(v) >= 10 \
        else f"{v:.2g}"


def _share(v: Any) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{100 * v:.0f}%"


def step_line(st: dict[str, Any]) -> str:
    """One step's parallelism, lessees, true rate and busy share, in words.

    >>> step_line({"parallelism": 4, "lessees": 1, "true_processing_eps": 12000.0,
    ...            "busy": 0.634})
    '4 instances + 1 lessee   true 12,000 ev/s   busy 63%'
    """
    n, lent = int(st.get("parallelism") or 0), int(st.get("lessees") or 0)
    who = f"{n} instance{'s' if n != 1 else ''}" + \
        (f" + {lent} lessee{'s' if lent != 1 else ''}" if lent else "")
    return f"{who}   true {_rate(st.get('true_processing_eps'))} ev/s   busy " \
        f"{_share(st.get('busy'))}"


def _when(at: Any) -> str:
    """A decision's time, when it is an epoch time (the controller may count seconds on
    a clock of its own, which says nothing to people: then nothing is shown)."""
    return f"{iso_time(at)}  " if isinstance(at, (int, float)) and at >= 1e9 else ""


def decision_line(d: dict[str, Any], *, dataflow: bool = True) -> str:
    """One scaling decision and its reason.

    >>> decision_line({"at": 5.0, "dataflow": "a", "step": "w", "from_parallelism": 2,
    ...                "to_parallelism": 4, "policy": "ds2", "reason": "needs 3.2"})
    'a/w 2 -> 4 (ds2): needs 3.2'
    """
    what = "lessees" if d.get("kind") == "lessees" else ""
    where = f"{d.get('dataflow')}/{d.get('step')}" if dataflow else str(d.get("step"))
    return (f"{_when(d.get('at'))}{where} {what + ' ' if what else ''}"
            f"{d.get('from_parallelism')} -> {d.get('to_parallelism')} "
            f"({d.get('policy')}): {d.get('reason')}")


def render_scaling(status: dict[str, Any]) -> str:
    """The scaling controller's view for people (`cameo scaling [NAME]`): the pool, then
    per dataflow its steps, its last decisions with their reasons, and its misses; then
    the misses and failed actions of dataflows not shown (or of the pool)."""
    bounds = status.get("bounds") or {}
    head = [f"scaling: pool policy {status.get('policy', '-')}"
            + ("" if status.get("enabled") else " (no dataflow is scaled)")]
    if status.get("executors") is not None:
        head.append(f"executors {status['executors']}"
                    + (f", wanted {status['wanted_executors']}"
                       if status.get("wanted_executors") is not None else ""))
    if bounds:
        head.append(f"bounds: executors {bounds.get('min_executors', '-')}-"
                    f"{bounds.get('max_executors', '-')}, parallelism at most "
                    f"{bounds.get('max_parallelism', '-')}")
    lines = ["; ".join(head)]
    flows = status.get("dataflows") or {}
    decisions = status.get("decisions") or []
    misses = status.get("misses") or []
    for name, flow in sorted(flows.items()):
        within = flow.get("within_target")
        lines += ["", f"{name}  policy {flow.get('policy', '-')}" + (
            f"  within target {100 * within:.1f} %" if isinstance(within, (int, float)) else "")]
        rows = [{"step": step, "parallelism": st.get("parallelism"),
                 "lessees": st.get("lessees", 0),
                 "true_eps": _rate(st.get("true_processing_eps")), "busy": _share(st.get("busy")),
                 "in_eps": _rate(st.get("events_in_eps")), "out_eps": _rate(st.get("events_out_eps")),
                 "backlog": _rate(st.get("backlog_events"))}
                for step, st in (flow.get("steps") or {}).items()]
        if rows:
            lines += ["  " + line for line in render_table(rows, SCALING_COLUMNS).splitlines()]
        for source, src in sorted((flow.get("sources") or {}).items()):
            lines.append(f"  source {source}: {_rate(src.get('rate_eps'))} ev/s in, "
                         f"{_rate(src.get('backlog_events'))} waiting at the writers "
                         f"({_rate(src.get('backlog_growth_eps'))} ev/s growth)")
        own = [d for d in decisions if d.get("dataflow") == name][-SCALING_DECISIONS_SHOWN:]
        if own:
            lines.append("  decisions")
            lines += [f"    {decision_line(d, dataflow=False)}" for d in own]
        lines += [f"  will miss its target: {m.get('reason')}" for m in misses
                  if m.get("dataflow") == name]
    if not flows:
        lines += ["", "no dataflow measured yet (scaling off, or it just started)"]
    unshown = [d for d in decisions if d.get("dataflow") not in flows][-SCALING_DECISIONS_SHOWN:]
    if unshown:
        lines += ["", "decisions of dataflows not measured now"]
        lines += [f"  {decision_line(d)}" for d in unshown]
    others = [m for m in misses if m.get("dataflow") not in flows]
    if others:
        lines += ["", "misses"] + [f"  {m.get('dataflow')}: {m.get('reason')}" for m in others]
    errors = status.get("errors") or []
    if errors:
        lines += ["", "failed actions (retried)"]
        lines += [f"  {iso_time(e.get('at'))}  {e.get('where')}: {e.get('error')}"
                  for e in errors]
    return "\n".join(lines)


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain left-aligned table; epoch seconds in "*_at" and TIME_COLUMNS as ISO 8601.

    >>> print(render_table([{"a": 1, "b": "x", "created": 0.0}], ["a", "b", "created"]))
    a  b  created
    1  x  1970-01-01T00:00:00Z
    """
    cells = [[str(c) for c in columns]] + [[_cell(r.get(c), c) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _cell(v: Any, column: str = "") -> str:
    is_time = column.endswith("_at") or column in TIME_COLUMNS
    if is_time and isinstance(v, (int, float)) and not isinstance(v, bool):
        return iso_time(v)
    if isinstance(v, list):
        return ",".join(map(str, v))
    if isinstance(v, float):
        return f"{v:g}"
    return "-" if v is None else str(v)
