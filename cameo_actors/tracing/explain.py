"""What critical paths were made of: per snapshot, per dataflow, aggregated, in words.

A *segment* is a group of edges with the same labels (`Segment`); its weight is a
share of the pool's critical participation, or the ms that a dataflow's result paths
spent in it. Waiting is split by whom it waited behind.

- `summarize`: the pool-wide PAG's CP per segment and per type, operator, executor,
  channel, dataflow and whom waiting was behind.
- `dataflow_paths`: each result of a dataflow followed back through its messages'
  parents to the client's ingest, as a sub-DAG of the same `Edge` type (one node set
  per activity, shared by the results it led to) analysed by the same DP with the
  result nodes as sinks. Each result *message* is one path whose length is its latency
  from its chain's ingest; a message carrying several results (a window firing) counts
  once, so shares are of the summed latency of result messages.
- `snapshot`: one JSON-able dict per interval; `explain` aggregates snapshots (the pool:
  CP averaged, weighted by span; a dataflow: ms summed) into the shape the service and
  its web page read, with `words` for people; `redact` hides other tenants' names.
"""

from __future__ import annotations

import copy
import math
import time
from collections import ChainMap, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from .critical import critical_participation
from .pag import Busy, Pag, activities_of, build_pag, busy_by_executor
from .records import FROM_CLIENT, PROCESS, Activity, executor_of

#: latency samples kept per dataflow and snapshot (evenly spaced in end order)
MAX_SAMPLES = 200
#: critical_path entries an explanation lists
TOP = 10
SUMMARY_KEYS = ("by_type", "by_operator", "by_executor", "by_channel", "by_dataflow",
                "waiting_behind")
_NOTHING = "nothing else ran: held by flow control or scheduling"
#: kinds of edge split by whom the executor ran meanwhile
_SPLIT = ("waiting", "ingest")


class Segment(NamedTuple):
    """The labels that group edges (and the keys of a critical_path entry)."""

    kind: str
    dataflow: str | None = None
    step: str | None = None
    executor: int | None = None
    from_executor: int | None = None
    #: waiting: the dataflow and step that ran meanwhile (None: nothing else ran)
    behind: str | None = None
    behind_step: str | None = None


def segments(pag: Pag, cp: Sequence[float]) -> dict[Segment, float]:
    """Sum `cp` (one value per edge of `pag`) per segment; waiting split by overlap."""
    plain: dict[tuple[Any, ...], float] = defaultdict(float)  # tuples: cheaper than Segments
    for e, c in zip(pag.edges, cp, strict=True):
        if c <= 0:
            continue
        rest = c
        if e.kind in _SPLIT and e.weight > 0:
            for d, s, ms in e.behind:
                part = min(rest, c * ms / e.weight)
                plain[e.kind, e.dataflow, e.step, e.executor, None, d, s] += part
                rest -= part
            if rest <= c * 1e-9:
                continue
        plain[e.kind, e.dataflow, e.step, e.executor, e.from_executor, None, None] += rest
    out: dict[Segment, float] = defaultdict(float)
    for (k, d, s, ex, frm, b, bs), c in plain.items():
        out[Segment(k, d or None, s or None, ex, frm, b, bs or None)] += c
    return dict(out)


def _channel(s: Segment) -> str:
    if s.kind == "ingest":
        return f"client -> executor {s.executor}"
    if s.from_executor is None:
        return f"local on executor {s.executor}"
    return f"executor {s.from_executor} -> executor {s.executor}"


def _summary(weights: Mapping[Segment, float]) -> dict[str, dict[str, float]]:
    """The six share tables of `weights` (normalised to sum to 1), largest first."""
    total = math.fsum(weights.values())
    groups: dict[str, dict[str, float]] = {k: defaultdict(float) for k in SUMMARY_KEYS}
    for s, w in weights.items():
        if total <= 0:
            break
        x = w / total
        groups["by_type"][s.kind] += x
        if s.kind in ("processing", "egress") and s.dataflow:
            groups["by_operator"][_name(s.dataflow, s.step)] += x
        if s.executor is not None:
            groups["by_executor"][str(s.executor)] += x
        if s.kind in ("transfer", "ingest"):
            groups["by_channel"][_channel(s)] += x
        if s.dataflow:
            groups["by_dataflow"][s.dataflow] += x
        if s.kind == "waiting" or (s.kind == "ingest" and s.behind):
            groups["waiting_behind"][s.behind or ""] += x
    return {k: _ranked(v) for k, v in groups.items()}


def _ranked(d: Mapping[str, float]) -> dict[str, float]:
    return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def _seg_json(s: Segment, **value: float) -> dict[str, Any]:
    return {**s._asdict(), **value}


def _seg_of(d: Mapping[str, Any]) -> Segment:
    return Segment(*(d[k] for k in Segment._fields))


def summarize(pag: Pag, cp: Sequence[float]) -> dict[str, Any]:
    """Shares of the pool-wide CP: the six tables of `SUMMARY_KEYS`, and "segments"
    (a list of `Segment` fields with their "share") for `explain` to rank."""
    seg = segments(pag, cp)
    return {**_summary(seg), "segments": [_seg_json(s, share=x) for s, x in seg.items()]}


@dataclass
class DataflowPaths:
    """The result paths of one dataflow that ended in [start_ms, end_ms]."""

    dataflow: str
    start_ms: float
    end_ms: float
    #: result messages followed back (one path each)
    paths: int = 0
    results: int = 0
    within: int = 0
    target_ms: float | None = None
    #: latency (end - ingest_ms) of result messages: samples, at most MAX_SAMPLES
    latency_ms: list[float] = field(default_factory=list)
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    #: ms of the paths per segment (sums to the paths' summed length)
    segments: dict[Segment, float] = field(default_factory=dict)
    #: the same of the late paths only: result messages with a result over the target
    late_paths: int = 0
    late_segments: dict[Segment, float] = field(default_factory=dict)
    #: step -> ms of its own work on the paths: processing, egress, and the waits of the
    #: dataflow's messages behind it
    operators: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (what `snapshot` stores; `explain` reads it)."""
        return {"paths": self.paths, "results": self.results, "within": self.within,
                "target_ms": self.target_ms, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "max_ms": self.max_ms, "latency_ms": list(self.latency_ms),
                "segments": [_seg_json(s, ms=v) for s, v in self.segments.items()],
                "late_paths": self.late_paths,
                "late_segments": [_seg_json(s, ms=v) for s, v in self.late_segments.items()],
                "operators": dict(self.operators)}


def _quantile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted `xs`."""
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else None


class _Busy:
    """`Busy` per executor from a lookup's process activities, made on first need."""

    def __init__(self, lookup: Mapping[int, Activity],
                 by: Mapping[int, Busy] | None = None) -> None:
        self.lookup = lookup
        self.by = by

    def behind(self, executor: int, a: float, b: float) -> tuple[tuple[str, str, float], ...]:
        if b <= a:
            return ()
        if self.by is None:
            self.by = busy_by_executor(self.lookup.values())
        busy = self.by.get(executor)
        return busy.behind(a, b) if busy else ()


def _link(g: Pag, m: Activity, pe: int | None, busy: _Busy) -> int:
    """Add message `m`'s edges after its parent's end node `pe`; its end node."""
    ex, df, step = m.executor, m.dataflow, m.step
    t0 = g.times[pe] if pe is not None else -math.inf
    a = max(m.arrival_ms if not math.isnan(m.arrival_ms) else m.start_ms, t0)
    if pe is not None:
        arr = g.node(a)
        frm = executor_of(m.parent)
        g.edge(pe, arr, "transfer", ex, df, step, None if frm == ex else frm)
    elif not math.isnan(m.ingest_ms):  # the chain's start: the client's ingest, or untraced
        src = g.node(min(m.ingest_ms, a))
        arr = g.node(a)
        if m.parent == FROM_CLIENT:
            g.edge(src, arr, "ingest", ex, df, step, behind=busy.behind(ex, g.times[src], a))
        else:
            g.edge(src, arr, "untraced", None, df, step)
    else:
        arr = g.node(a)
    s = max(m.start_ms, a)
    g.edge(arr, st := g.node(s), "waiting", ex, df, step, behind=busy.behind(ex, a, s))
    x = max(m.end_ms - m.egress_ms, s) if m.egress_ms > 0 else max(m.end_ms, s)
    g.edge(st, mid := g.node(x), "processing", ex, df, step)
    if m.egress_ms <= 0:
        return mid
    g.edge(mid, end := g.node(max(m.end_ms, x)), "egress", ex, df, step)
    return end


def _chain(r: Activity, built: Mapping[int, object],
           lookup: Mapping[int, Activity]) -> list[Activity]:
    """`r` and its ancestors (through `parent`) not yet `built`, newest first."""
    chain: list[Activity] = []
    seen: set[int] = set()  # a loop of parent ids (bad data) ends the chain
    a: Activity | None = r
    while a is not None and a.id not in built and a.id not in seen:
        chain.append(a)
        seen.add(a.id)
        parent = lookup.get(a.parent) if a.parent > 0 else None
        a = parent if parent is not None and parent.kind == PROCESS else None
    return chain


def _paths(lookup: Mapping[int, Activity], candidates: Iterable[Activity], start_ms: float,
           end_ms: float, only: str | None,
           by: Mapping[int, Busy] | None = None) -> dict[str, DataflowPaths]:
    """`DataflowPaths` per dataflow (or only `only`) of the result activities among
    `candidates` that ended in the window, followed back through `lookup`."""
    sinks: dict[str, list[Activity]] = defaultdict(list)
    for c in candidates:
        if c.kind == PROCESS and c.results > 0 and start_ms <= c.end_ms <= end_ms \
                and (only is None or c.dataflow == only):
            sinks[c.dataflow].append(c)
    busy = _Busy(lookup, by)
    return {d: _follow(d, rs, lookup, busy, start_ms, end_ms) for d, rs in sinks.items()}


def _follow(dataflow: str, results: list[Activity], lookup: Mapping[int, Activity],
            busy: _Busy, start_ms: float, end_ms: float) -> DataflowPaths:
    """The paths of `results` (all of `dataflow`) as one sub-DAG, analysed by the DP."""
    g = Pag(start_ms, end_ms)
    built: dict[int, tuple[int, float]] = {}  # activity id -> (end node, chain's root time)
    ends: list[int] = []
    late: list[int] = []
    total = late_total = 0.0
    p = DataflowPaths(dataflow, start_ms, end_ms)
    lat: list[float] = []
    for r in sorted(results, key=lambda a: (a.end_ms, a.id)):  # ancestors first
        for m in reversed(_chain(r, built, lookup)):
            up = built.get(m.parent) if m.parent > 0 else None
            first = len(g.times)
            node = _link(g, m, up[0] if up else None, busy)
            built[m.id] = (node, up[1] if up else g.times[first])
        node, root = built[r.id]
        ends.append(node)
        total += g.times[node] - root
        if r.within < r.results:
            late.append(node)
            late_total += g.times[node] - root
        p.paths += 1
        p.results += r.results
        p.within += r.within
        if not math.isnan(r.target_ms):
            p.target_ms = r.target_ms
        lat.append(r.end_ms - r.ingest_ms if not math.isnan(r.ingest_ms) else g.times[node] - root)
    cp = critical_participation(g, sinks=ends)
    p.segments = {s: x * total for s, x in segments(g, cp).items()}
    # What the late ones went through, apart: a tight tenant's few late results are
    # drowned in the average of its many quick ones.
    p.late_paths = len(late)
    if late:
        late_cp = cp if len(late) == len(ends) else critical_participation(g, sinks=late)
        p.late_segments = {s: x * late_total for s, x in segments(g, late_cp).items()}
    # Each step's own work on the paths: its processing and writing, and the waits its
    # work caused the dataflow's messages (a window's firing watermark queued behind the
    # map's data is the map's doing).
    ops: dict[str, float] = defaultdict(float)
    for s, ms in p.segments.items():
        if s.kind in ("processing", "egress") and s.step:
            ops[s.step] += ms
        elif s.behind == dataflow and s.behind_step:
            ops[s.behind_step] += ms
    p.operators = dict(ops)
    ranked = sorted(lat)
    p.p50_ms, p.p99_ms, p.max_ms = _quantile(ranked, 0.5), _quantile(ranked, 0.99), ranked[-1]
    n = len(lat)
    p.latency_ms = lat if n <= MAX_SAMPLES else [lat[i * n // MAX_SAMPLES]
                                                 for i in range(MAX_SAMPLES)]
    return p


def dataflow_paths(index: Mapping[int, Activity], dataflow: str, start_ms: float,
                   end_ms: float) -> DataflowPaths:
    """The result paths of `dataflow`'s results that ended in [start_ms, end_ms].

    `index` maps process activity ids to activities over a longer history than the
    window, so a result whose latency is longer than the window is still followed back
    to its client's ingest; where a parent is missing the rest is "untraced".

    Example:
        >>> from cameo_actors.tracing.records import trace_id
        >>> r = Activity(PROCESS, 0, 4.0, 6.0, id=trace_id(0, 1), parent=FROM_CLIENT,
        ...              dataflow="alerts", step="sink", ingest_ms=1.0, arrival_ms=2.0,
        ...              results=1, within=1, target_ms=50.0)
        >>> p = dataflow_paths({r.id: r}, "alerts", 0.0, 10.0)
        >>> p.results, p.latency_ms, sorted((s.kind, ms) for s, ms in p.segments.items())
        (1, [5.0], [('ingest', 1.0), ('processing', 2.0), ('waiting', 2.0)])
    """
    found = _paths(index, index.values(), start_ms, end_ms, dataflow)
    return found.get(dataflow) or DataflowPaths(dataflow, start_ms, end_ms)


def snapshot(activities: Iterable[Activity], start_ms: float, end_ms: float,
             index: Mapping[int, Activity]) -> dict[str, Any]:
    """One interval's analysis as a JSON-able dict: the pool's CP summary and each
    dataflow's result paths (`activities` are the window's; `index` the longer history
    of process activities, which need not hold the window's own)."""
    t0 = time.thread_time()  # CPU time of this thread: what analysing costs on one core
    acts = activities_of(activities)
    window = {a.id: a for a in acts if a.kind == PROCESS}
    lookup = (index if window.keys() <= index.keys()
              else ChainMap(window, cast(dict[int, Activity], index)))
    # Who ran when, for both the pool's waits and the results' paths: only as far back as
    # those paths go (a result's ingest time is its path's start), not the whole history.
    since = min([start_ms] + [a.ingest_ms for a in window.values()
                              if a.results > 0 and a.ingest_ms == a.ingest_ms])
    busy = busy_by_executor(a for a in lookup.values()
                            if a.end_ms >= since and a.start_ms <= end_ms)
    pag = build_pag(acts, start_ms, end_ms, busy)
    pool = summarize(pag, critical_participation(pag))
    paths = _paths(lookup, window.values(), start_ms, end_ms, None, busy)
    return {"start_ms": start_ms, "end_ms": end_ms, "activities": len(acts),
            "analysis_ms": (time.thread_time() - t0) * 1000.0, "pool": pool,
            "dataflows": {d: paths[d].to_json() for d in sorted(paths)}}


# -- explain: aggregate snapshots ------------------------------------------------------

def _name(dataflow: str | None, step: str | None) -> str:
    if not dataflow:
        return step or "?"
    return dataflow if not step else f"{dataflow}/{step}"


def _pct(x: float) -> str:
    return "<1%" if 0 < x < 0.005 else f"{round(100 * x)}%"


def _text(e: Mapping[str, Any]) -> str:
    """One critical_path entry in plain words."""
    p, kind, ex, fe = _pct(e["share"]), e["kind"], e["executor"], e["from_executor"]
    on = f" on executor {ex}" if ex is not None else ""
    who = _name(e["dataflow"], e["step"])
    if kind == "processing":
        return f"{p} processing in {who}{on}"
    if kind == "egress":
        return f"{p} writing results of {who}{on}"
    if kind == "waiting":
        if (e["behind"], e["behind_step"]) == (e["dataflow"], e["step"]):
            return f"{p} {who} queued{on} behind its own earlier messages"
        if e["behind"]:
            return f"{p} processing in {_name(e['behind'], e['behind_step'])}{on} while {who} waited"
        return f"{p} {who} waiting{on} ({_NOTHING})"
    if kind == "transfer":
        if fe is None:
            return f"{p} local transfer on executor {ex} into {who}"
        return f"{p} transfer executor {fe} -> executor {ex} into {who}"
    if kind == "ingest":
        if e["behind"]:
            return (f"{p} processing in {_name(e['behind'], e['behind_step'])}{on} while "
                    f"input to {who} waited to enter")
        return (f"{p} ingest into {who}{on}: the client's call waiting for room at the source "
                "(backpressure) or for the worker thread")
    if kind == "serialize":
        return f"{p} serializing batches for other executors{on}"
    if kind == "deserialize":
        return f"{p} deserializing a batch from executor {fe}{on}" if fe is not None \
            else f"{p} deserializing a batch{on}"
    if kind == "idle":
        return f"{p} idle{on}"
    if kind == "untraced":
        return f"{p} untraced: the message chain into {who} was not traced back to its source"
    return f"{p} {kind}{on}"


def _entries(weights: Mapping[Segment, float], ms_per_share: float | None,
             total: float | None = None) -> list[dict[str, Any]]:
    """The TOP segments of `weights` as ranked critical_path entries (shares of `total`,
    by default of all the weights)."""
    total = math.fsum(weights.values()) if total is None else total
    if total <= 0:
        return []
    ranked = sorted(weights.items(), key=lambda kv: (-kv[1], str(kv[0])))[:TOP]
    out = []
    for s, w in ranked:
        share = w / total
        e = {"share": share, "ms": None if ms_per_share is None else share * ms_per_share,
             **s._asdict()}
        e["text"] = _text(e)
        out.append(e)
    return out


def words(x: Mapping[str, Any]) -> list[str]:
    """The headline and one line per critical_path entry of explanation `x`."""
    d, span = x["dataflow"], f"the last {x['last_s']:g} s"
    if not x["snapshots"]:
        return [f"no trace snapshots in {span}: is tracing on (trace_sample > 0)?"]
    if d is None:
        if not x["critical_path"] and not x["summary"]["by_type"]:
            return [f"no traced activity in the pool in {span}: is tracing on "
                    "(trace_sample > 0) and is data flowing?"]
        idle = x["summary"]["by_type"].get("idle", 0.0)
        head = (f"the pool: {x['activities']:,} activities in {x['snapshots']} snapshots over "
                f"{span}; executors idle on {_pct(idle)} of its critical path; the rest:")
    elif not x["results"]:
        return [f"no traced results of {d} in {span}: is tracing on (trace_sample > 0) and is "
                "data flowing?"]
    elif x["within_target"] is not None and x["latency_target_ms"] is not None:
        head = (f"{d}: {_pct(x['within_target'])} of {x['results']:,} results within the "
                f"{x['latency_target_ms']:g} ms target over {span}; its critical path:")
    else:
        head = f"{d}: {x['results']:,} results over {span}; its critical path:"
    return [head] + [e["text"] for e in x["critical_path"]]


def late_words(x: Mapping[str, Any]) -> list[str]:
    """A headline and one line per late_path entry of explanation `x` (none if nothing
    was late, or `x` is from a version without them)."""
    if not x.get("late_path"):
        return []
    n = x["late_paths"]
    head = (f"{x['dataflow']}: {n:,} result message{'s' if n != 1 else ''} over its target; "
            "their critical path:")
    return [head] + [e["text"] for e in x["late_path"]]


def explain(snapshots: Sequence[Mapping[str, Any]], dataflow: str | None, last_s: float,
            now_ms: float, latency_target_ms: float | None = None) -> dict[str, Any]:
    """Aggregate the snapshots that ended within `last_s` of `now_ms` (see the module).

    For a dataflow, critical_path and summary are shares of the summed latency of its
    result messages, and each entry's "ms" is per result message; for the pool
    (`dataflow` None) they are the pool-wide CP averaged over the snapshots (weighted
    by their spans), "ms" being the share of the mean snapshot span. "within_target"
    counts the results the runtime marked within the dataflow's own target, unless
    `latency_target_ms` differs from it: then it is the share of latency samples within.
    "late_path" ranks the same way the paths of the "late_paths" result messages that
    carried a result over the dataflow's own target ("ms": per late message).

    Example:
        >>> explain([], "alerts", 60, 0.0)["words"]
        ['no trace snapshots in the last 60 s: is tracing on (trace_sample > 0)?']
    """
    since = now_ms - last_s * 1000.0
    used = sorted((s for s in snapshots if s["end_ms"] >= since), key=lambda s: s["end_ms"])
    x: dict[str, Any] = {
        "dataflow": dataflow, "last_s": float(last_s),
        "from_ms": min((s["start_ms"] for s in used), default=None),
        "to_ms": max((s["end_ms"] for s in used), default=None),
        "snapshots": len(used), "activities": sum(s["activities"] for s in used),
        "latency_target_ms": latency_target_ms, "results": 0, "within_target": None,
        "latency": [], "operators": {}, "critical_path": [], "late_paths": 0, "late_path": [],
        "summary": {k: {} for k in SUMMARY_KEYS}, "words": [], "late_words": []}
    if dataflow is None:
        _explain_pool(x, used)
    else:
        _explain_dataflow(x, used, dataflow, latency_target_ms)
    x["words"], x["late_words"] = words(x), late_words(x)
    return x


def _explain_pool(x: dict[str, Any], used: Sequence[Mapping[str, Any]]) -> None:
    weights: dict[Segment, float] = defaultdict(float)
    spans = []
    for s in used:
        segs = s["pool"]["segments"]
        if not segs:
            continue
        span = s["end_ms"] - s["start_ms"]
        spans.append(span)
        for seg in segs:
            weights[_seg_of(seg)] += seg["share"] * span
    if spans:
        # Idle time lies on most of a lightly loaded pool's paths and says nothing about
        # what to fix: it is in the summary and the headline, not in the ranking.
        busy = {s: w for s, w in weights.items() if s.kind != "idle"}
        x["critical_path"] = _entries(busy, sum(spans) / len(spans), math.fsum(weights.values()))
        x["summary"] = _summary(weights)


def _explain_dataflow(x: dict[str, Any], used: Sequence[Mapping[str, Any]], dataflow: str,
                      target: float | None) -> None:
    recorded = [s["dataflows"][dataflow]["target_ms"] for s in used
                if dataflow in s["dataflows"] and s["dataflows"][dataflow]["target_ms"] is not None]
    if target is None and recorded:
        target = recorded[-1]
    x["latency_target_ms"] = target
    weights: dict[Segment, float] = defaultdict(float)
    late: dict[Segment, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    paths = results = within = late_paths = 0
    for s in used:
        p = s["dataflows"].get(dataflow)
        row = {"t_ms": s["end_ms"], "results": 0, "within": 0, "p50_ms": None, "p99_ms": None,
               "max_ms": None}
        if p is not None:
            w = p["within"]
            if target is not None and p["target_ms"] != target and p["latency_ms"]:
                inside = sum(1 for v in p["latency_ms"] if v <= target)
                w = round(p["results"] * inside / len(p["latency_ms"]))
            row.update(results=p["results"], within=w, p50_ms=p["p50_ms"], p99_ms=p["p99_ms"],
                       max_ms=p["max_ms"])
            paths, results, within = paths + p["paths"], results + p["results"], within + w
            for seg in p["segments"]:
                weights[_seg_of(seg)] += seg["ms"]
            late_paths += p.get("late_paths", 0)  # (not in the snapshots of older versions)
            for seg in p.get("late_segments", ()):
                late[_seg_of(seg)] += seg["ms"]
            for step, ms in p["operators"].items():
                ops[step] += ms
        x["latency"].append(row)
    x["results"] = results
    x["within_target"] = within / results if results and target is not None else None
    total = math.fsum(weights.values())
    if results and total > 0:
        x["operators"] = _ranked({k: v / total for k, v in ops.items()})
        x["critical_path"] = _entries(weights, total / paths)
        x["summary"] = _summary(weights)
    late_total = math.fsum(late.values())
    if late_paths and late_total > 0:
        x["late_paths"], x["late_path"] = late_paths, _entries(late, late_total / late_paths)


def redact(explanation: Mapping[str, Any], visible: Callable[[str], bool],
           other: str = "another tenant") -> dict[str, Any]:
    """A copy of `explanation` in which every dataflow name that is not `visible` reads
    `other` (its steps hidden too), with entries that became equal merged and the words
    written anew.

    Example:
        >>> x = explain([], "alerts", 60, 0.0)
        >>> redact(x, lambda d: d == "alerts")["dataflow"]
        'alerts'
    """
    x = copy.deepcopy(dict(explanation))

    def hide(name: str | None) -> str | None:
        return name if not name or visible(name) else other

    own_hidden = x["dataflow"] is not None and hide(x["dataflow"]) != x["dataflow"]
    x["dataflow"] = hide(x["dataflow"])
    if own_hidden:
        x["operators"] = {}
    for ranked in ("critical_path", "late_path"):
        merged: dict[Segment, dict[str, Any]] = {}
        for e in x.get(ranked, ()):
            if hide(e["dataflow"]) != e["dataflow"]:
                e["dataflow"], e["step"] = other, None
            if hide(e["behind"]) != e["behind"]:
                e["behind"], e["behind_step"] = other, None
            key = _seg_of(e)
            if key in merged:
                m = merged[key]
                m["share"] += e["share"]
                m["ms"] = None if m["ms"] is None or e["ms"] is None else m["ms"] + e["ms"]
            else:
                merged[key] = e
        x[ranked] = sorted(merged.values(), key=lambda e: -e["share"])
        for e in x[ranked]:
            e["text"] = _text(e)
    summary = x["summary"]
    for k in ("by_operator", "by_dataflow", "waiting_behind"):
        table: dict[str, float] = defaultdict(float)
        for name, v in summary.get(k, {}).items():
            d, _, step = name.partition("/")
            shown = hide(d) or ""
            table[name if shown == d else shown] += v
        summary[k] = _ranked(table)
    x["words"], x["late_words"] = words(x), late_words(x)
    return x
