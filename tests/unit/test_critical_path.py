"""The critical-path analysis (SnailTrail): PAGs, the CP dynamic programme, per-dataflow
result paths and the explanations built from them. Pure: hand-made activities only."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.tracing import (
    Pag,
    build_pag,
    critical_participation,
    dataflow_paths,
    explain,
    path_counts,
    redact,
    snapshot,
)
from cameo_actors.tracing.pag import Busy
from cameo_actors.tracing.records import (
    DESERIALIZE,
    FROM_CLIENT,
    PROCESS,
    SERIALIZE,
    UNTRACED,
    Activity,
    trace_id,
)


def graph(times: Sequence[float], edges: Sequence[tuple[int, int]]) -> Pag:
    g = Pag(min(times), max(times))
    for t in times:
        g.node(t)
    for u, v in edges:
        g.edge(u, v, "processing")
    return g


# -- critical participation: by hand -----------------------------------------------------

def test_a_chain_shares_by_length() -> None:
    assert critical_participation(graph([0, 2, 5], [(0, 1), (1, 2)])) == pytest.approx([0.4, 0.6])


def test_a_diamond_counts_every_path() -> None:
    # s(0) -> a(1) -> t(4), s -> b(3) -> t, s -> t: three paths of 4 ms, 12 ms in all
    g = graph([0, 1, 3, 4], [(0, 1), (1, 3), (0, 2), (2, 3), (0, 3)])
    assert critical_participation(g) == pytest.approx([1 / 12, 3 / 12, 3 / 12, 1 / 12, 4 / 12])
    assert path_counts(g) == ([1, 1, 1, 3], [3, 1, 1, 1])


def test_two_timelines_and_a_transfer_match_snailtrails_formula() -> None:
    # timeline 0: 0 -processing-> 4 -idle-> 10; timeline 1: 0 -idle-> 6 -processing-> 10;
    # a transfer 4 -> 6. Paths: 3, each spans the window: CP = C * w / (3 * 10).
    g = graph([0, 4, 10, 0, 6, 10], [(0, 1), (1, 2), (3, 4), (4, 5), (1, 4)])
    expected = [2 * 4 / 30, 1 * 6 / 30, 1 * 6 / 30, 2 * 4 / 30, 1 * 2 / 30]
    assert critical_participation(g) == pytest.approx(expected)


def test_chosen_sources_and_sinks() -> None:
    g = graph([0, 1, 3, 4], [(0, 1), (1, 3), (0, 2), (2, 3), (0, 3)])
    # only paths from b (node 2): b -> t
    assert critical_participation(g, sources=[2]) == pytest.approx([0, 0, 0, 1, 0])
    # paths ending at a (node 1): s -> a
    assert critical_participation(g, sinks=[1]) == pytest.approx([1, 0, 0, 0, 0])


def test_no_length_gives_zeros() -> None:
    assert critical_participation(graph([1, 1, 1], [(0, 1), (1, 2)])) == [0.0, 0.0]
    assert critical_participation(Pag(0, 1)) == []


def test_exponential_path_counts_do_not_overflow() -> None:
    # a ladder of k rungs with both crossings: 2 * 2**k paths, every edge on 2**(k-1)
    k = 3000
    times = [float(i) for i in range(k + 1) for _ in (0, 1)]
    edges = []
    for i in range(k):
        a, b, a2, b2 = 2 * i, 2 * i + 1, 2 * i + 2, 2 * i + 3
        edges += [(a, a2), (b, b2), (a, b2), (b, a2)]
    cp = critical_participation(graph(times, edges))
    assert all(math.isfinite(x) for x in cp)
    assert cp == pytest.approx([1 / (4 * k)] * (4 * k))


def test_edges_must_go_forward() -> None:
    g = graph([0, 1], [])
    with pytest.raises(ValueError, match="goes back"):
        g.edge(1, 0, "idle")
    g.node(1.0)
    g.edge(1, 2, "idle")  # equal times: forward in creation order
    with pytest.raises(ValueError):
        g.edge(2, 1, "idle")


# -- critical participation: against brute force -----------------------------------------

def brute_force(g: Pag, sources: set[int], sinks: set[int]) -> list[float]:
    out_edges: dict[int, list[int]] = {}
    for k, e in enumerate(g.edges):
        out_edges.setdefault(e.u, []).append(k)
    paths: list[list[int]] = []

    def walk(node: int, path: list[int]) -> None:
        if path and node in sinks:
            paths.append(list(path))
        for k in out_edges.get(node, []):
            path.append(k)
            walk(g.edges[k].v, path)
            path.pop()

    for s in sources:
        walk(s, [])
    total = sum(g.edges[k].weight for p in paths for k in p)
    if total == 0:
        return [0.0] * len(g.edges)
    return [sum(g.edges[k].weight for p in paths if k in p) / total
            for k in range(len(g.edges))]


@st.composite
def dags(draw: st.DrawFn) -> tuple[Pag, set[int] | None, set[int] | None]:
    n = draw(st.integers(2, 7))
    times = sorted(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=12))  # repeats: parallel edges
    g = graph([float(t) for t in times], edges)
    sources = draw(st.none() | st.sets(st.integers(0, n - 1)))
    sinks = draw(st.none() | st.sets(st.integers(0, n - 1)))
    return g, sources, sinks


@settings(max_examples=300, deadline=None)
@given(dags())
def test_cp_equals_path_enumeration(case: tuple[Pag, set[int] | None, set[int] | None]) -> None:
    g, sources, sinks = case
    cp = critical_participation(g, sources, sinks)
    has_in = {e.v for e in g.edges}
    has_out = {e.u for e in g.edges}
    src = sources if sources is not None else set(range(len(g.times))) - has_in
    snk = sinks if sinks is not None else set(range(len(g.times))) - has_out
    expected = brute_force(g, src, snk)
    assert cp == pytest.approx(expected, abs=1e-9)
    assert sum(cp) == pytest.approx(1.0 if any(expected) else 0.0)


# -- the pool's PAG -----------------------------------------------------------------------

def proc(ex: int, n: int, start: float, end: float, dataflow: str, step: str,
         parent: int = FROM_CLIENT, arrival: float | None = None, ingest: float = math.nan,
         **kw: object) -> Activity:
    return Activity(PROCESS, ex, start, end, id=trace_id(ex, n), parent=parent,
                    dataflow=dataflow, step=step, activation=f"{dataflow}/{step}#0",
                    ingest_ms=ingest, arrival_ms=start if arrival is None else arrival,
                    **kw)  # type: ignore[arg-type]


def edges_of(g: Pag, kind: str) -> list:
    return [e for e in g.edges if e.kind == kind]


def test_waiting_names_whom_it_waited_behind() -> None:
    bulk = proc(0, 1, 1.0, 5.0, "bulk", "map_1", ingest=1.0)
    alert = proc(0, 2, 5.0, 6.0, "alerts", "filter", arrival=2.0, ingest=1.5)
    g = build_pag([bulk, alert], 0.0, 10.0)
    (wait,) = [e for e in edges_of(g, "waiting") if e.dataflow == "alerts"]
    assert (g.times[wait.u], g.times[wait.v]) == (2.0, 5.0)
    assert wait.behind == (("bulk", "map_1", 3.0),)
    ingest = [e for e in edges_of(g, "ingest") if e.dataflow == "alerts"]
    assert [(g.times[e.u], e.weight, e.v) for e in ingest] == [(1.5, 0.5, wait.u)]
    assert [(e.kind, e.weight) for e in g.edges[:4]] == [
        ("idle", 1.0), ("processing", 4.0), ("processing", 1.0), ("idle", 4.0)]


def test_ingest_names_whom_the_worker_ran_before_taking_the_call() -> None:
    # The client's call came at 1.5; the worker took it from its inbox only after bulk's
    # message (to 5.0): 3.5 of the 4 ms of ingest were spent behind bulk/map_1.
    bulk = proc(0, 1, 1.0, 5.0, "bulk", "map_1", ingest=1.0)
    alert = proc(0, 2, 5.5, 6.0, "alerts", "filter", arrival=5.5, ingest=1.5,
                 results=1, within=1, target_ms=50.0)
    (ingest,) = [e for e in edges_of(build_pag([bulk, alert], 0.0, 10.0), "ingest")
                 if e.dataflow == "alerts"]
    assert ingest.behind == (("bulk", "map_1", 3.5),)
    why = explain([snapshot([bulk, alert], 0.0, 10.0, by_id([bulk, alert]))], "alerts",
                  60, 10.0)
    assert why["critical_path"][0]["text"] == (
        "78% processing in bulk/map_1 on executor 0 while input to alerts/filter waited to enter")
    assert why["summary"]["waiting_behind"]["bulk"] == pytest.approx(3.5 / 4.5)


def test_a_step_queued_behind_itself_says_so() -> None:
    first = proc(0, 1, 1.0, 5.0, "bulk", "map_1", ingest=1.0, arrival=1.0)
    second = proc(0, 2, 5.0, 6.0, "bulk", "map_1", ingest=1.0, arrival=1.0, results=1,
                  within=1, target_ms=1000.0)
    why = explain([snapshot([first, second], 0.0, 10.0, by_id([first, second]))], "bulk",
                  60, 10.0)
    assert why["critical_path"][0]["text"] == \
        "80% bulk/map_1 queued on executor 0 behind its own earlier messages"
    # The step's own work, waited for or run, is all of the path: the graph colours it so.
    assert why["operators"] == pytest.approx({"map_1": 1.0})


def test_transfer_between_executors_and_local() -> None:
    a = proc(0, 1, 1.0, 3.0, "alerts", "filter", ingest=0.5, arrival=0.5)
    b = proc(1, 1, 5.0, 6.0, "alerts", "sink", parent=a.id, arrival=4.0)
    c = proc(0, 2, 3.5, 4.0, "alerts", "count", parent=a.id, arrival=2.0)
    g = build_pag([a, b, c], 0.0, 10.0)
    transfers = sorted(edges_of(g, "transfer"), key=lambda e: e.step)
    assert [(e.step, e.executor, e.from_executor, g.times[e.u], g.times[e.v])
            for e in transfers] == [("count", 0, None, 3.0, 3.0), ("sink", 1, 0, 3.0, 4.0)]
    waits = sorted(edges_of(g, "waiting"), key=lambda e: e.step)
    assert [(e.step, e.weight) for e in waits] == [("count", 0.5), ("filter", 0.5), ("sink", 1.0)]


def test_egress_is_split_off_processing() -> None:
    a = proc(0, 1, 2.0, 6.0, "alerts", "sink", egress_ms=1.0, results=1)
    g = build_pag([a], 0.0, 10.0)
    assert [(e.kind, e.weight) for e in g.edges] == [
        ("idle", 2.0), ("processing", 3.0), ("egress", 1.0), ("idle", 4.0)]


def test_clock_skew_and_overlap_never_go_backwards() -> None:
    parent = proc(0, 1, 1.0, 5.0, "alerts", "filter")
    child = proc(1, 1, 4.0, 6.0, "alerts", "sink", parent=parent.id, arrival=3.0)
    overlap = proc(1, 2, 5.5, 7.0, "alerts", "sink", parent=parent.id, arrival=5.0)
    ser = Activity(SERIALIZE, 0, 4.5, 5.5)
    de = Activity(DESERIALIZE, 1, 7.0, 7.5, peer=0)
    g = build_pag([parent, child, overlap, ser, de], 0.0, 10.0)
    assert all(e.weight >= 0 for e in g.edges)
    # the child started before its parent ended (skew): no transfer into it; `overlap`
    # starts when the child ends (6), its message arrived when the parent ended (5)
    assert [(g.times[e.u], g.times[e.v]) for e in edges_of(g, "transfer")] == [(5.0, 5.0)]
    assert [(e.step, g.times[e.u], g.times[e.v]) for e in edges_of(g, "waiting")] == [
        ("sink", 3.0, 4.0), ("sink", 5.0, 6.0)]
    assert [e.from_executor for e in edges_of(g, "deserialize")] == [0]
    assert sum(critical_participation(g)) == pytest.approx(1.0)


def test_activities_are_clipped_to_the_window() -> None:
    a = proc(0, 1, -5.0, 2.0, "alerts", "filter", arrival=-6.0)
    b = proc(0, 2, 8.0, 15.0, "alerts", "sink", parent=a.id, arrival=3.0)
    g = build_pag([a, b], 0.0, 10.0)
    assert min(g.times) == 0.0 and max(g.times) == 10.0
    # a started before the window: no message edges of its own
    assert [e.step for e in edges_of(g, "waiting")] == ["sink"]


@st.composite
def timelines(draw: st.DrawFn) -> list[Activity]:
    acts = []
    for ex in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(0, 6))):
            start = draw(st.floats(-20, 120))
            dur = draw(st.floats(0, 30))
            kind = draw(st.sampled_from([PROCESS, SERIALIZE, DESERIALIZE]))
            acts.append(Activity(kind, ex, start, start + dur, id=trace_id(ex, i + 1),
                                 parent=UNTRACED, dataflow="d", step="s",
                                 egress_ms=draw(st.sampled_from([0.0, dur / 2]))))
    return acts


@settings(max_examples=200, deadline=None)
@given(timelines())
def test_timelines_are_contiguous_and_span_the_window(acts: list[Activity]) -> None:
    g = build_pag(acts, 0.0, 100.0)
    assert {e.kind for e in g.edges} <= {"processing", "egress", "serialize", "deserialize",
                                         "idle"}
    p_in, p_out = path_counts(g)
    sources = [i for i, c in enumerate(p_in) if c == 1 and all(e.v != i for e in g.edges)]
    sinks = [i for i in range(len(g.times)) if all(e.u != i for e in g.edges)]
    if not g.edges:
        return
    assert {g.times[i] for i in sources} == {0.0}
    assert {g.times[i] for i in sinks} == {100.0}
    paths = sum(p_in[i] for i in sinks)
    total = sum(p_in[e.u] * p_out[e.v] * e.weight for e in g.edges)
    assert total == pytest.approx(paths * 100.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5), st.sampled_from("abc")),
                max_size=30),
       st.integers(-5, 45), st.integers(0, 30))
def test_whom_a_wait_was_behind_matches_overlaps(
        spans: list[tuple[int, int, str]], a: int, length: int) -> None:
    acts = [proc(0, i + 1, float(s), float(s + d), "d" + k, k) for i, (s, d, k) in enumerate(spans)]
    busy = Busy(acts)
    expected: dict[tuple[str, str], float] = {}
    for s, e, d, k in busy.spans:  # made disjoint
        overlap = min(e, a + length) - max(s, a)
        if overlap > 0:
            expected[d, k] = expected.get((d, k), 0.0) + overlap
    got = {(d, k): ms for d, k, ms in busy.behind(float(a), float(a + length))}
    assert got == pytest.approx(expected)
    assert sum(e - s for s, e, *_ in busy.spans) <= sum(d for _, d, _ in spans)


# -- per-dataflow result paths ------------------------------------------------------------

def alerts_chain(shift: float = 0.0) -> list[Activity]:
    """client -> e0 alerts/filter (waits 4 ms behind bulk/map_1) -> e1 alerts/sink."""
    s = shift
    n = int(shift) + 1
    bulk = proc(0, 3 * n, 2 + s, 6 + s, "bulk", "map_1", ingest=2 + s)
    filt = proc(0, 3 * n + 1, 6 + s, 7 + s, "alerts", "filter", arrival=1 + s, ingest=0 + s)
    sink = proc(1, 3 * n + 2, 9 + s, 12 + s, "alerts", "sink", parent=filt.id, arrival=8 + s,
                ingest=0 + s, egress_ms=1.0, results=3, within=2, target_ms=50.0)
    return [bulk, filt, sink]


def by_id(acts: Sequence[Activity]) -> dict[int, Activity]:
    return {a.id: a for a in acts}


def test_a_result_is_followed_back_to_the_client() -> None:
    p = dataflow_paths(by_id(alerts_chain()), "alerts", 10.0, 20.0)
    assert (p.paths, p.results, p.within, p.target_ms) == (1, 3, 2, 50.0)
    assert p.latency_ms == [12.0] and p.p50_ms == p.p99_ms == p.max_ms == 12.0
    ms = {(s.kind, s.step, s.executor, s.from_executor, s.behind, s.behind_step): v
          for s, v in p.segments.items()}
    assert ms == pytest.approx({
        ("ingest", "filter", 0, None, None, None): 1.0,
        ("waiting", "filter", 0, None, "bulk", "map_1"): 4.0,
        ("waiting", "filter", 0, None, None, None): 1.0,
        ("processing", "filter", 0, None, None, None): 1.0,
        ("transfer", "sink", 1, 0, None, None): 1.0,
        ("waiting", "sink", 1, None, None, None): 1.0,
        ("processing", "sink", 1, None, None, None): 2.0,
        ("egress", "sink", 1, None, None, None): 1.0,
    })
    assert p.operators == pytest.approx({"filter": 1.0, "sink": 3.0})
    # not in the window: nothing
    assert dataflow_paths(by_id(alerts_chain()), "alerts", 0.0, 10.0).paths == 0


def test_a_missing_parent_leaves_the_rest_untraced() -> None:
    sink = proc(1, 1, 9.0, 12.0, "alerts", "sink", parent=trace_id(0, 99), arrival=8.0,
                ingest=2.0, results=1)
    p = dataflow_paths(by_id([sink]), "alerts", 0.0, 20.0)
    assert {s.kind: v for s, v in p.segments.items()} == pytest.approx(
        {"untraced": 6.0, "waiting": 1.0, "processing": 3.0})
    assert p.latency_ms == [10.0]


def test_results_sharing_an_ancestor_are_one_path_each() -> None:
    filt = proc(0, 1, 1.0, 2.0, "alerts", "filter", arrival=1.0, ingest=0.0)
    a = proc(0, 2, 2.0, 3.0, "alerts", "sink", parent=filt.id, ingest=0.0, results=1)
    b = proc(0, 3, 3.0, 5.0, "alerts", "sink", parent=filt.id, arrival=2.0, ingest=0.0,
             results=1)
    p = dataflow_paths(by_id([filt, a, b]), "alerts", 0.0, 10.0)
    assert p.paths == 2 and sorted(p.latency_ms) == [3.0, 5.0]
    kinds: dict[str, float] = {}
    for s, v in p.segments.items():
        kinds[s.kind] = kinds.get(s.kind, 0.0) + v
    # the shared ingest and filter count once per result; b waited 1 ms behind a
    assert kinds == pytest.approx({"ingest": 2.0, "processing": 5.0, "waiting": 1.0})
    assert [s.behind for s in p.segments if s.kind == "waiting"] == ["alerts"]
    assert sum(p.segments.values()) == pytest.approx(8.0)


# -- snapshots and explanations -----------------------------------------------------------

ENTRY_KEYS = {"share", "ms", "kind", "dataflow", "step", "executor", "from_executor", "behind",
              "behind_step", "text"}
TOP_KEYS = {"dataflow", "last_s", "from_ms", "to_ms", "snapshots", "activities",
            "latency_target_ms", "results", "within_target", "latency", "operators",
            "critical_path", "late_paths", "late_path", "summary", "words", "late_words"}
SUMMARY_KEYS = {"by_type", "by_operator", "by_executor", "by_channel", "by_dataflow",
                "waiting_behind"}


def two_snapshots() -> list[dict]:
    first, second = alerts_chain(), alerts_chain(100.0)
    index = by_id(first + second)
    return [snapshot(first, 0.0, 20.0, index), snapshot(second, 100.0, 120.0, index)]


def test_snapshots_are_json() -> None:
    snaps = two_snapshots()
    json.dumps(snaps, allow_nan=False)
    s = snaps[0]
    assert set(s) == {"start_ms", "end_ms", "activities", "analysis_ms", "pool", "dataflows"}
    assert s["activities"] == 3 and list(s["dataflows"]) == ["alerts"]
    assert sum(x["share"] for x in s["pool"]["segments"]) == pytest.approx(1.0)
    assert set(s["pool"]) == SUMMARY_KEYS | {"segments"}


def test_explain_a_dataflow() -> None:
    x = explain(two_snapshots(), "alerts", 60.0, 120.0)
    json.dumps(x, allow_nan=False)
    assert set(x) == TOP_KEYS and set(x["summary"]) == SUMMARY_KEYS
    assert (x["snapshots"], x["activities"], x["results"]) == (2, 6, 6)
    assert (x["from_ms"], x["to_ms"], x["latency_target_ms"]) == (0.0, 120.0, 50.0)
    assert x["within_target"] == pytest.approx(4 / 6)
    assert x["latency"] == [
        {"t_ms": 20.0, "results": 3, "within": 2, "p50_ms": 12.0, "p99_ms": 12.0, "max_ms": 12.0},
        {"t_ms": 120.0, "results": 3, "within": 2, "p50_ms": 12.0, "p99_ms": 12.0,
         "max_ms": 12.0}]
    assert x["operators"] == pytest.approx({"sink": 3 / 12, "filter": 1 / 12})
    cp = x["critical_path"]
    assert all(set(e) == ENTRY_KEYS for e in cp)
    assert [e["share"] for e in cp] == sorted((e["share"] for e in cp), reverse=True)
    top = cp[0]
    assert (top["kind"], top["behind"], top["behind_step"], top["executor"]) == (
        "waiting", "bulk", "map_1", 0)
    assert top["share"] == pytest.approx(4 / 12) and top["ms"] == pytest.approx(4.0)
    assert top["text"] == "33% processing in bulk/map_1 on executor 0 while alerts/filter waited"
    assert sum(e["share"] for e in cp) == pytest.approx(1.0)
    texts = {e["text"] for e in cp}
    assert "8% transfer executor 0 -> executor 1 into alerts/sink" in texts
    assert ("8% ingest into alerts/filter on executor 0: the client's call waiting for room "
            "at the source (backpressure) or for the worker thread") in texts
    assert x["words"][0] == ("alerts: 67% of 6 results within the 50 ms target over the last "
                             "60 s; its critical path:")
    assert x["words"][1:] == [e["text"] for e in cp]
    summary = x["summary"]
    assert summary["waiting_behind"] == pytest.approx({"bulk": 4 / 12, "": 2 / 12})
    assert summary["by_channel"] == pytest.approx({"client -> executor 0": 1 / 12,
                                                   "executor 0 -> executor 1": 1 / 12})
    assert summary["by_operator"] == pytest.approx({"alerts/sink": 3 / 12,
                                                    "alerts/filter": 1 / 12})
    assert summary["by_dataflow"] == pytest.approx({"alerts": 1.0})


def test_the_late_results_paths_are_explained_apart() -> None:
    """39 quick alerts and one that waited 30 ms behind bulk: the whole critical path is
    mostly the alerts' own processing, the late one's mostly the wait behind bulk."""
    acts, n = [], 0
    for i in range(40):
        t = 100.0 * i
        n += 2
        slow = i == 39
        if slow:
            acts.append(proc(0, n - 1, t + 1, t + 31, "bulk", "map_1", ingest=t + 1))
        acts.append(proc(0, n, t + 31 if slow else t + 1, t + 33 if slow else t + 3, "alerts",
                         "s", arrival=t, ingest=t, results=1, within=0 if slow else 1,
                         target_ms=20.0))
    p = dataflow_paths(by_id(acts), "alerts", 0.0, 4000.0)
    assert (p.paths, p.late_paths) == (40, 1)
    assert sum(p.late_segments.values()) == pytest.approx(33.0)
    assert {(s.kind, s.behind): v for s, v in p.late_segments.items()} == pytest.approx(
        {("waiting", None): 1.0, ("waiting", "bulk"): 30.0, ("processing", None): 2.0})
    x = explain([snapshot(acts, 0.0, 4000.0, by_id(acts))], "alerts", 60.0, 4000.0)
    json.dumps(x, allow_nan=False)
    assert x["critical_path"][0]["kind"] == "processing"  # 80 of 150 ms in all
    assert x["late_paths"] == 1
    top = x["late_path"][0]
    assert (top["kind"], top["behind"], top["ms"]) == ("waiting", "bulk", pytest.approx(30.0))
    assert x["late_words"] == [
        "alerts: 1 result message over its target; their critical path:",
        *(e["text"] for e in x["late_path"])]
    assert x["late_words"][1] == ("91% processing in bulk/map_1 on executor 0 while alerts/s "
                                  "waited")
    # hidden from another tenant as the whole path is
    r = redact(x, lambda d: d == "alerts")
    assert r["late_path"][0]["behind"] == "another tenant" and "bulk" not in json.dumps(r)
    # snapshots of versions before carry no late paths: the rest is explained as before
    old = json.loads(json.dumps(snapshot(acts, 0.0, 4000.0, by_id(acts))))
    for d in old["dataflows"].values():
        del d["late_paths"], d["late_segments"]
    y = explain([old], "alerts", 60.0, 4000.0)
    assert (y["late_paths"], y["late_path"], y["late_words"]) == (0, [], [])
    assert y["critical_path"] == x["critical_path"]


def test_explain_keeps_only_the_last_seconds() -> None:
    x = explain(two_snapshots(), "alerts", 0.05, 120.0)
    assert (x["snapshots"], x["results"], x["from_ms"]) == (1, 3, 100.0)
    assert [r["t_ms"] for r in x["latency"]] == [120.0]
    # a tighter target than the recorded one: counted from the latency samples
    y = explain(two_snapshots(), "alerts", 60.0, 120.0, latency_target_ms=10.0)
    assert y["within_target"] == 0.0 and y["latency_target_ms"] == 10.0


def test_explain_the_pool() -> None:
    x = explain(two_snapshots(), None, 60.0, 120.0)
    assert set(x) == TOP_KEYS
    assert (x["results"], x["within_target"], x["latency"], x["operators"]) == (0, None, [], {})
    cp = x["critical_path"]
    assert 0 < len(cp) <= 10 and all(set(e) == ENTRY_KEYS for e in cp)
    assert [e["share"] for e in cp] == sorted((e["share"] for e in cp), reverse=True)
    assert sum(x["summary"]["by_type"].values()) == pytest.approx(1.0)
    # Idle time is left out of the ranking, and told in the headline instead.
    idle = x["summary"]["by_type"]["idle"]
    assert idle > 0 and all(e["kind"] != "idle" for e in cp)
    assert sum(e["share"] for e in cp) == pytest.approx(1.0 - idle)
    assert x["words"][0].startswith("the pool: 6 activities in 2 snapshots")
    assert f"executors idle on {round(100 * idle)}% of its critical path" in x["words"][0]


def test_explain_says_when_there_is_nothing() -> None:
    x = explain([], "alerts", 60.0, 0.0)
    assert set(x) == TOP_KEYS
    assert (x["critical_path"], x["latency"], x["from_ms"], x["within_target"]) == (
        [], [], None, None)
    assert x["words"] == ["no trace snapshots in the last 60 s: is tracing on (trace_sample > 0)?"]
    y = explain(two_snapshots(), "quiet", 60.0, 120.0)
    assert y["words"] == ["no traced results of quiet in the last 60 s: is tracing on "
                          "(trace_sample > 0) and is data flowing?"]
    assert y["critical_path"] == [] and y["summary"]["by_type"] == {}


def test_redact_hides_other_tenants_and_merges() -> None:
    x = explain(two_snapshots(), "alerts", 60.0, 120.0)
    r = redact(x, lambda d: d == "alerts")
    text = json.dumps(r)
    assert "bulk" not in text and "map_1" not in text
    top = r["critical_path"][0]
    assert (top["behind"], top["behind_step"]) == ("another tenant", None)
    assert top["text"] == ("33% processing in another tenant on executor 0 while alerts/filter "
                           "waited")
    assert r["summary"]["waiting_behind"] == pytest.approx({"another tenant": 4 / 12, "": 2 / 12})
    assert x["critical_path"][0]["behind"] == "bulk"  # the original is left alone
    # the pool: two other tenants' processing on one executor become one entry
    acts = [proc(0, 1, 0.0, 4.0, "bulk", "map_1"), proc(0, 2, 4.0, 8.0, "etl", "load"),
            proc(0, 3, 8.0, 10.0, "alerts", "filter")]
    pool = explain([snapshot(acts, 0.0, 10.0, by_id(acts))], None, 60.0, 10.0)
    hidden = redact(pool, lambda d: d == "alerts", other="others")
    assert [(e["kind"], e["dataflow"]) for e in hidden["critical_path"]] == [
        ("processing", "others"), ("processing", "alerts")]
    assert [e["share"] for e in hidden["critical_path"]] == pytest.approx([0.8, 0.2])
    assert hidden["summary"]["by_operator"] == pytest.approx({"others": 0.8,
                                                              "alerts/filter": 0.2})
    assert hidden["summary"]["by_dataflow"] == pytest.approx({"others": 0.8, "alerts": 0.2})
    assert hidden["words"][1] == "80% processing in others on executor 0"
