"""The `cameo` command's words for people: an answer made lines of text (the status view,
tables and the scaling view are `service.view`'s, shared with the web page)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cameo_actors.service.protocol import json_safe
from cameo_actors.service.view import iso_time


def render_explanation(e: Mapping[str, Any]) -> str:
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


def format_row(row: Mapping[str, Any], *, errors: bool = False) -> str:
    """One readable line per row: when it left (UTC, to the ms), then the latency and the
    result, or for the error output the step, kind, message and the record.

    >>> format_row({"event": {"n": 1}, "ingest_ms": 1000.0, "egress_ms": 1012.5})
    '1970-01-01T00:00:01.012Z     12.5 ms  {"n": 1}'
    """
    event = json.dumps(json_safe(row.get("event")), sort_keys=True, default=repr)
    egress_ms = row.get("egress_ms")
    when = iso_time(None if egress_ms is None else egress_ms / 1000.0, ms=True)
    if errors:
        return f"{when}  {row.get('step')}:{row.get('kind')}  {row.get('message')}  {event}"
    ingest = row.get("ingest_ms")
    latency = f"{egress_ms - ingest:7.1f} ms" if ingest is not None and egress_ms is not None \
        else f"{'-':>7} ms"
    return f"{when}  {latency}  {event}"


def submitted(r: Mapping[str, Any]) -> str:
    """What a submit did: created, replaced, or nothing (the same spec runs)."""
    what = "replaced" if r.get("replaced") else "created" if r["created"] else \
        "unchanged (the same spec runs already)"
    return f"{r['id']}: {what} (tenant {r['tenant']})"


def cancelled(r: Mapping[str, Any]) -> str:
    if r.get("ended_before"):
        return f"{r['name']}: {r['state']} already (what it kept is freed)"
    return f"{r['name']}: {r['state']} ({r['messages_dropped']} queued messages dropped)"


def migration_started(m: Mapping[str, Any]) -> str:
    """A migration as it starts.

    >>> migration_started({"id": "m1", "dataflow": "k", "step": "win", "kind": "scale",
    ...     "from_parallelism": 1, "to_parallelism": 4, "strategy": "fluid",
    ...     "bins_total": 3072, "state": "running"})
    'k/win: scale 1 -> 4 instances (fluid, 3072 bins), migration m1 running'
    """
    what = (f"{m['kind']} {m.get('from_parallelism')} -> {m.get('to_parallelism')} instances"
            if m.get("kind") == "scale" else str(m.get("kind")))
    return (f"{m['dataflow']}/{m['step']}: {what} ({m.get('strategy')}, "
            f"{m.get('bins_total', 0)} bins), migration {m['id']} {m['state']}")


def migration_ended(m: Mapping[str, Any]) -> str:
    """How a migration ended: its state, time, what moved, and why it failed."""
    line = (f"migration {m['id']} ({m['dataflow']}/{m['step']}): {m['state']} in "
            f"{float(m.get('duration_s') or 0.0):.1f} s, {m.get('bins_moved', 0)}/"
            f"{m.get('bins_total', 0)} bins, {m.get('epochs_done', 0)}/"
            f"{m.get('epochs_total', 0)} epochs, {(m.get('bytes_moved') or 0) / 1e6:.2f} MB "
            f"moved, ended {iso_time(m.get('ended_at'))}")
    return line + (f": {m.get('error')}" if m.get("state") == "failed" else "")


def drained(r: Mapping[str, Any]) -> list[str]:
    """A node drained: its executors retired, the dataflows restored, Ray's refusals."""
    return ([f"node {r['node']} drained in {r['seconds']:.1f} s: executor(s) "
             f"{', '.join(map(str, r['executors']))} retired; "
             f"{len(r['dataflows'])} dataflow(s) restored on the executors left"]
            + ["  " + name for name in r["dataflows"]]
            + [f"warning: Ray did not drain node {node} (new executors may start there): {why}"
               for node, why in (r.get("ray_refused") or {}).items()])


def scaling_changed(name: str, settings: Mapping[str, Any] | None,
                    pins: Mapping[str, int | None], status: Mapping[str, Any]) -> str:
    """What `cameo scaling set` changed: the settings, the policy now, each pin."""
    flow = (status.get("dataflows") or {}).get(name) or {}
    return (f"{name}: scaling settings " + ("the pool's" if settings is None else ", ".join(
        f"{k}={v}" for k, v in sorted(settings.items())))
        + (f"; policy {flow['policy']}" if flow.get("policy") else "")
        + "".join(f"; {step} " + ("unpinned" if p is None else f"pinned at {p}")
                  for step, p in sorted(pins.items())))
