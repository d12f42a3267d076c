"""The program activity graph (PAG) of one snapshot window [start_ms, end_ms].

How this follows SnailTrail (Hoffmann et al., NSDI'18):
- Each executor's worker thread is a *timeline*: its traced activities (process,
  serialize, deserialize) in time order, clipped to the window, linked one after the
  other; gaps are "idle" edges and the timeline runs from the window's start to its
  end, so every source-to-sink path of timeline edges spans the window.
- *Communication edges* join timelines: a message's "transfer" edge runs from the end
  of the activity that sent it to its arrival at the receiving activation.
- The message then *waits* in the mailbox and run queue until its activity starts.

What is ours: SnailTrail keeps waiting only implicitly (it cuts it out of the paths
it ranks); we keep every "waiting" edge and label it with whom it waited behind (the
process activities that ran on that worker meanwhile), because on a shared Cameo pool
waiting behind another tenant's operator is what a tenant wants to know. Messages
from a client get an "ingest" edge (the client's call waiting for room at the
source, backpressure, and for the worker to take it from its inbox between two
messages: labelled with whom it ran meanwhile, like waiting), and a process activity's tail spent writing results is an
"egress" edge of its own.

Nodes are ordered by (time, creation order) and every edge goes forward in that order
(`Pag.edge` checks it), so the graph is a DAG even with zero-weight edges. A zero-
weight message edge that would go backwards (only when timestamps tie) is left out:
it carries no time. So is a transfer from a parent that ended after its child started
(clock skew between processes): it would go back in time.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .records import DESERIALIZE, FROM_CLIENT, PROCESS, SERIALIZE, Activity, executor_of

EDGE_KINDS = ("processing", "egress", "serialize", "deserialize", "idle", "waiting",
              "transfer", "ingest")

#: (dataflow, step, ms): a process activity that ran during a wait, and for how long.
Behind = tuple[str, str, float]


class Edge(NamedTuple):
    """One labelled edge u -> v of a PAG; `weight` = time(v) - time(u) >= 0 (ms).

    A NamedTuple rather than a frozen dataclass: a window has ~4 edges per activity
    and a tuple is several times cheaper to make.
    """

    u: int
    v: int
    weight: float
    kind: str
    executor: int | None = None
    dataflow: str | None = None
    step: str | None = None
    #: transfer: the sending executor (None: local); deserialize: the peer
    from_executor: int | None = None
    #: waiting: who ran on the executor's worker meanwhile, largest first
    behind: tuple[Behind, ...] = ()


@dataclass(slots=True)
class Pag:
    """Nodes (their times, by id) and edges of one window.

    Example:
        >>> g = Pag(0.0, 10.0)
        >>> a, b = g.node(0.0), g.node(4.0)
        >>> g.edge(a, b, "processing", executor=0).weight
        4.0
    """

    start_ms: float
    end_ms: float
    times: list[float] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def node(self, t: float) -> int:
        """A new node at time `t`; its id."""
        self.times.append(t)
        return len(self.times) - 1

    def forward(self, u: int, v: int) -> bool:
        """Whether u -> v goes forward in (time, creation order)."""
        return (self.times[u], u) < (self.times[v], v)

    def edge(self, u: int, v: int, kind: str, executor: int | None = None,
             dataflow: str | None = None, step: str | None = None,
             from_executor: int | None = None, behind: tuple[Behind, ...] = ()) -> Edge:
        """Add the edge u -> v labelled `kind` and the other fields of `Edge`."""
        times = self.times
        tu, tv = times[u], times[v]
        if not (tu < tv or (tu == tv and u < v)):
            raise ValueError(f"edge {u} -> {v} ({kind}) goes back in (time, creation order): "
                             f"{tu} -> {tv}")
        # Positional: a NamedTuple made from keywords costs several times more.
        e = Edge(u, v, tv - tu, kind, executor, dataflow, step, from_executor, behind)
        self.edges.append(e)
        return e


class Busy:
    """Who ran on one executor's worker: its process activities, for "waited behind".

    Intervals are sorted and made disjoint (a start before the previous end, clock
    noise, is moved to it). `behind(a, b)` scans the intervals in [a, b] when few, and
    otherwise sums per (dataflow, step) with prefix sums, so a long wait costs
    O(operators * log n), not O(activities it spans). Answers are kept: the pool's
    PAG and the dataflows' paths of a snapshot ask about the same waits.
    """

    def __init__(self, activities: Iterable[Activity]) -> None:
        spans: list[tuple[float, float, str, str]] = []
        last = -math.inf
        for a in sorted(activities, key=lambda a: (a.start_ms, a.end_ms)):
            s = max(a.start_ms, last)
            last = max(a.end_ms, s)
            spans.append((s, last, a.dataflow, a.step))
        self.spans = spans
        self.starts = [s[0] for s in spans]
        self.ends = [s[1] for s in spans]
        # per (dataflow, step): span indexes and prefix sums of their durations
        self.pos: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.cum: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0])
        for i, (s, e, d, st) in enumerate(spans):
            self.pos[d, st].append(i)
            self.cum[d, st].append(self.cum[d, st][-1] + e - s)
        self.known: dict[tuple[float, float], tuple[Behind, ...]] = {}

    def behind(self, a: float, b: float) -> tuple[Behind, ...]:
        """(dataflow, step, ms) of what ran in [a, b], largest first."""
        found = self.known.get((a, b))
        if found is None:
            found = self.known[a, b] = self._behind(a, b)
        return found

    def _behind(self, a: float, b: float) -> tuple[Behind, ...]:
        i, j = bisect_right(self.ends, a), bisect_left(self.starts, b)
        if i >= j:
            return ()
        ms: dict[tuple[str, str], float] = defaultdict(float)
        for k in {i, j - 1}:  # the first and last may be cut by [a, b]
            s, e, d, st = self.spans[k]
            ms[d, st] += max(0.0, min(e, b) - max(s, a))
        if j - i <= 2 + len(self.pos):
            for k in range(i + 1, j - 1):
                s, e, d, st = self.spans[k]
                ms[d, st] += e - s
        else:
            for key, pos in self.pos.items():
                lo, hi = bisect_left(pos, i + 1), bisect_left(pos, j - 1)
                if hi > lo:
                    ms[key] += self.cum[key][hi] - self.cum[key][lo]
        out = [(d, st, v) for (d, st), v in ms.items() if v > 0]
        out.sort(key=lambda x: -x[2])
        return tuple(out)


def activities_of(records: Iterable[Activity | Sequence[object]]) -> list[Activity]:
    """`Activity` records from activities or the plain tuples executors keep."""
    return [r if isinstance(r, Activity) else Activity._make(r) for r in records]


def busy_by_executor(activities: Iterable[Activity]) -> dict[int, Busy]:
    """A `Busy` per executor from the process activities among `activities`."""
    by: dict[int, list[Activity]] = defaultdict(list)
    for a in activities:
        if a.kind == PROCESS:
            by[a.executor].append(a)
    return {e: Busy(acts) for e, acts in by.items()}


def build_pag(activities: Iterable[Activity], start_ms: float, end_ms: float,
              busy: Mapping[int, Busy] | None = None) -> Pag:
    """The PAG of the window [start_ms, end_ms] (see the module's text).

    `busy` tells who ran on each executor for the waiting edges' `behind` (default:
    the process activities among `activities`).

    Example:
        >>> from cameo_actors.tracing.records import trace_id
        >>> a = Activity(PROCESS, 0, 2.0, 5.0, id=trace_id(0, 1), parent=FROM_CLIENT,
        ...              dataflow="alerts", step="filter", ingest_ms=0.0, arrival_ms=1.0)
        >>> [(e.kind, e.weight) for e in build_pag([a], 0.0, 10.0).edges]
        [('idle', 2.0), ('processing', 3.0), ('idle', 5.0), ('ingest', 1.0), ('waiting', 1.0)]
    """
    g = Pag(start_ms, end_ms)
    timelines: dict[int, list[Activity]] = defaultdict(list)
    for a in activities_of(activities):
        if a.kind in (PROCESS, SERIALIZE, DESERIALIZE) and a.end_ms >= start_ms \
                and a.start_ms <= end_ms:
            timelines[a.executor].append(a)
    ends: dict[int, int] = {}  # process activity id -> its end node
    starts: list[tuple[Activity, int]] = []  # process activities starting in the window
    if busy is None:
        busy = busy_by_executor(a for acts in timelines.values() for a in acts)
    for ex in sorted(timelines):
        acts = sorted(timelines[ex], key=lambda a: (a.start_ms, a.end_ms))
        cur = g.node(start_ms)
        for a in acts:
            s = min(max(a.start_ms, g.times[cur]), end_ms)  # clock noise: after the previous
            e = min(max(a.end_ms, s), end_ms)
            if s > g.times[cur]:
                g.edge(cur, nxt := g.node(s), "idle", executor=ex)
                cur = nxt
            first = cur
            if a.kind == PROCESS:
                mid = min(max(e - a.egress_ms, s), e) if a.egress_ms > 0 else e
                g.edge(cur, nxt := g.node(mid), "processing", ex, a.dataflow, a.step)
                cur = nxt
                if a.egress_ms > 0:
                    g.edge(cur, nxt := g.node(e), "egress", ex, a.dataflow, a.step)
                    cur = nxt
                ends[a.id] = cur
                if start_ms <= a.start_ms <= end_ms:
                    starts.append((a, first))
            else:
                kind = "serialize" if a.kind == SERIALIZE else "deserialize"
                peer = a.peer if a.kind == DESERIALIZE and a.peer >= 0 else None
                g.edge(cur, nxt := g.node(e), kind, executor=ex, from_executor=peer)
                cur = nxt
        if g.times[cur] < end_ms:
            g.edge(cur, g.node(end_ms), "idle", executor=ex)
    for p, st in starts:
        _message(g, p, st, ends, busy.get(p.executor) or Busy(()))
    return g


def _message(g: Pag, p: Activity, st: int, ends: dict[int, int], busy: Busy) -> None:
    """The ingest or transfer and the waiting edges of `p`'s message into node `st`."""
    t_st = g.times[st]
    arrival = p.arrival_ms if not math.isnan(p.arrival_ms) else t_st
    t_a = min(max(arrival, g.start_ms), t_st)
    ex, df, step = p.executor, p.dataflow, p.step
    pe = ends.get(p.parent) if p.parent > 0 else None
    if pe is not None and g.times[pe] > t_st:
        pe = None  # the parent ended after p started: clock skew, it would go back in time
    if pe is not None:
        t_a = max(t_a, g.times[pe])
    src = None
    if p.parent == FROM_CLIENT:
        ingest = p.ingest_ms if not math.isnan(p.ingest_ms) else t_a
        src = min(max(ingest, g.start_ms), t_a)
    # zero wait: the message's edge goes straight into st (no arrival node)
    s = g.node(src) if src is not None and (t_a < t_st or src < t_st) else None
    arr = g.node(t_a) if t_a < t_st else st
    if s is not None:  # the worker drains its inbox between messages: it waits for them too
        g.edge(s, arr, "ingest", ex, df, step, behind=busy.behind(g.times[s], t_a))
    elif pe is not None and g.forward(pe, arr):
        frm = executor_of(p.parent)
        g.edge(pe, arr, "transfer", ex, df, step, None if frm == ex else frm)
    if arr != st:
        g.edge(arr, st, "waiting", ex, df, step, behind=busy.behind(t_a, t_st))
