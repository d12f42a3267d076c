"""Scenarios of `python -m bench.cameo`: single, multi, spike, fair and overload, each under
several modes.

Builds on the harness: its two-tenant dataflows (`bench.harness.tenants`), seeded event
streams, steady or bursty (`bench.harness.workload`), and its runner for any set of
dataflows with their workloads (`bench.harness.runner`); this module adds the scenarios,
the ratios between modes and the medians over repeated runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from bench import mixes
from bench.harness.runner import Load, run
from bench.harness.tenants import SCHEMA, alerts, bulk, skewed_bulk
from bench.harness.workload import Workload
from cameo_actors import Dataflow
from cameo_actors.scheduling.admission import fair_allocation

#: mode -> RuntimeConfig keywords: "cameo" is deadline order alone, "floor" adds the tenant
#: floors (the default). The fair scenario maps its "cameo" slot to fair_share.
MODES = {
    "fifo": dict(policy="fifo", isolation="shared", tenant_floor=False),
    "cameo": dict(policy="cameo", isolation="shared", tenant_floor=False),
    "floor": dict(policy="cameo", isolation="shared", tenant_floor=True),
    "isolated": dict(policy="fifo", isolation="isolated", tenant_floor=False),
}
FAIR_MODES = {
    "fifo": dict(policy="fifo", isolation="shared", tenant_floor=False),
    "cameo": dict(policy="fair_share", isolation="shared", tenant_floor=False),
}
OVERLOAD_MODES = {m: MODES[m] for m in ("fifo", "cameo", "floor")}
RATIO_NOTE = "p99 of the latency-sensitive dataflows: the max over them (one in single, multi, spike)"


def ratios(modes: dict[str, Any]) -> dict[str, float | None]:
    """fifo/cameo, floor/cameo and isolated/cameo p99 of the latency-sensitive dataflows
    (max over them)."""
    def p99(mode: str) -> float | None:
        dfs = modes.get(mode, {}).get("dataflows", {})
        vals = [d["p99_ms"] for d in dfs.values() if d.get("latency_sensitive") and "p99_ms" in d]
        return max(vals) if vals else None

    cam = p99("cameo")
    out: dict[str, float | None] = {}
    for other in ("fifo", "floor", "isolated"):
        o = p99(other)
        out[f"{other}_over_cameo_p99"] = o / cam if o is not None and cam else None
    return out


#: How far the load a run reached may be from a scenario's stated load before its ratios
#: are not reported (they would compare runs at another load than stated).
LOAD_TOLERANCE = 0.15


def rotated(modes: dict[str, Any], turn: int) -> dict[str, Any]:
    """`modes` starting from the `turn`-th (modulo), so that over repeated runs no mode
    always runs after the same others, on a machine that earlier pools may leave busier.

    >>> list(rotated({"fifo": 1, "cameo": 2, "floor": 3}, 4))
    ['cameo', 'floor', 'fifo']
    """
    names = list(modes)
    k = turn % len(names)
    return {m: modes[m] for m in names[k:] + names[:k]}


def _scenario(loads_for_mode: Any, modes: dict[str, dict[str, Any]], warmup: float, seconds: float,
              sample_s: float | None = None, log: Any = print,
              load: float | None = None, flat_out: float = 1.0, turn: int = 0,
              explain: bool = False) -> dict[str, Any]:
    """Each mode's run (from the `turn`-th: `rotated`), and the ratios between them; with
    `load` (the load the scenario states, of the pool's capacity), the ratios only if every
    shared mode's run reached it (`off_load`, `flat_out`: the executors' busy share flat
    out), else None with the reason in "load_refused"."""
    res: dict[str, Any] = {}
    for mode, cfg in rotated(modes, turn).items():
        r = res[mode] = run(loads_for_mode(), mode, cfg, warmup, seconds, sample_s, explain)
        r["load_reached"] = r["utilization"] / flat_out
        parts = [f"{n} p99 {d.get('p99_ms', float('nan')):7.1f} ms {d.get('within_target', 0):6.1%} in target "
                 f"{d['throughput_eps']:8,.0f} ev/s" for n, d in r["dataflows"].items()]
        cpu = r["cpu"]
        log(f"  {mode:9s} ({cfg['policy']}{', floors' if cfg.get('tenant_floor') else ''}) "
            + " | ".join(parts) + f" | busy {r['utilization']:.0%} (load {r['load_reached']:.0%}) | "
            f"cores {cpu['cores_busy']}: " + ", ".join(
                f"{role} {s / cpu['wall_s']:.2f}" for role, s in cpu["cpu_s_by_role"].items() if s))
    res["ratios"] = ratios(res)
    res["ratios_over"] = RATIO_NOTE
    if load is not None:
        res["stated_load"], res["flat_out_busy"] = load, flat_out
        refused = off_load({m: res[m]["utilization"] for m in modes}, load, flat_out)
        if refused:
            res["load_refused"] = refused
            res["ratios"] = {k: None for k in res["ratios"]}
            log(f"  {refused}")
    return res


def off_load(busy: dict[str, float], load: float, flat_out: float = 1.0) -> str | None:
    """Why runs whose executors were `busy` (mode -> share) are not at `load`, or None.
    The load a run reached is its executors' busy share over `flat_out`, theirs with the
    pool saturated (`tenants.Capacity.busy`); it must be within `LOAD_TOLERANCE` of `load`,
    or for a load at or over capacity, at least 1 - LOAD_TOLERANCE, in every shared mode
    (isolated: placed apart on purpose, its executors are not loaded alike).

    >>> off_load({"fifo": 0.82, "cameo": 0.41, "isolated": 0.5}, 0.85)
    'the executors were cameo 41% busy (load 41%), not 85% (within 15%): no ratio'
    >>> off_load({"fifo": 0.68, "cameo": 0.72}, 0.85, flat_out=0.8) is None
    True
    >>> off_load({"fifo": 0.78, "cameo": 0.6}, 1.5, flat_out=0.8)
    'the executors were cameo 60% busy (load 75%), not saturated (85% or more): no ratio'
    """
    reached = {m: u / flat_out for m, u in busy.items() if m != "isolated"}
    if load >= 1.0:
        off = [m for m, r in reached.items() if r < 1.0 - LOAD_TOLERANCE]
        wanted = f"not saturated ({1.0 - LOAD_TOLERANCE:.0%} or more)"
    else:
        off = [m for m, r in reached.items() if abs(r - load) > LOAD_TOLERANCE]
        wanted = f"not {load:.0%} (within {LOAD_TOLERANCE:.0%})"
    if not off:
        return None
    return (f"the executors were {', '.join(f'{m} {busy[m]:.0%} busy (load {reached[m]:.0%})' for m in off)}, "
            f"{wanted}: no ratio")


# -- the scenarios ---------------------------------------------------------------------------------
RUN_S = 3600.0  # workloads are played until the run stops them


def alerts_load(seed: int = 1) -> Load:
    """alerts (filter, target 50 ms): 1,000 events/s in batches every 10 ms."""
    return Load(alerts(), Workload(1000, RUN_S, seed=seed, keys=10, period_s=0.01), latency_sensitive=True)


def bulk_workload(rate: float, seed: int = 2, **kw: Any) -> Workload:
    """Bulk input: `rate` events/s in batches every 100 ms over 200 keys."""
    return Workload(rate, RUN_S, seed=seed, keys=200, period_s=0.1, **kw)


#: Seconds each probe of a scenario's mix is measured for (`tuned`), after a warm-up of half
#: that, and the loads (of the capacity bulk alone reaches) it is probed at: both below the knee.
PROBE_S = 4.0
PROBE_LOADS = (0.45, 0.7)


def tuned(loads_at: Callable[[float], list[Load]], capacity: float, load: float, flat_out: float,
          log: Any = print, probe_s: float = PROBE_S) -> float:
    """The capacity to offer a scenario's load against, so that its executors reach `load`
    of their busy share flat out: its mix (`loads_at(capacity)`) is run alone under deadline
    order at two loads below the knee (`PROBE_LOADS`), and the busy share it reached is
    taken as a line in the rate offered (what the mix costs besides bulk is its intercept).
    (Offered 85% of the capacity bulk alone reaches, multi ran its executors at 93-99% of
    their busy share flat out, single at 86-96%; one probe near the knee, scaled, did not
    bring multi down: there the busy share hardly moves with the rate.)"""
    reached = []
    for share in PROBE_LOADS:
        probe = run(loads_at(capacity * share / load), "probe", MODES["cameo"], probe_s / 2, probe_s)
        reached.append(probe["utilization"] / flat_out)
    (a, ra), (b, rb) = zip(PROBE_LOADS, reached, strict=True)
    slope = (rb - ra) / (b - a)
    wanted = a + (load - ra) / slope if slope > 0 else load
    scaled = capacity * min(1.5, max(0.5, wanted / load))
    log(f"  probe: offered {a:.0%} and {b:.0%} of {capacity:,.0f} ev/s, the executors reached "
        f"{ra:.0%} and {rb:.0%} of flat out; offering {load:.0%} of {scaled:,.0f}")
    return scaled


def single(capacity: float, warmup: float, seconds: float, load: float = 0.85, window_ms: int = 250,
           log: Any = print, turn: int = 0, flat_out: float = 1.0, tune: bool = True,
           probe_s: float = PROBE_S) -> dict[str, Any]:
    """bulk alone at `load` of capacity (`tuned` first, `probe_s` a probe, unless not
    `tune`), with `window_ms` tumbling windows (several results a second, so a p99 over a
    short run is not the max of a handful of windows)."""
    def loads_at(cap: float) -> list[Load]:
        return [Load(bulk(window_ms=window_ms), bulk_workload(load * cap), latency_sensitive=True)]
    cap = tuned(loads_at, capacity, load, flat_out, log, probe_s) if tune else capacity
    res = _scenario(lambda: loads_at(cap), MODES, warmup, seconds, log=log, load=load, turn=turn,
                    flat_out=flat_out)
    res["single"] = {"load": load, "window_ms": window_ms, "offered_eps": load * cap}
    return res


def multi(capacity: float, warmup: float, seconds: float, load: float = 0.85, log: Any = print,
          turn: int = 0, flat_out: float = 1.0, tune: bool = True) -> dict[str, Any]:
    """bench/multitenant.py's setup: alerts (1,000 ev/s, 50 ms) + bulk, together at `load`
    of capacity (`tuned` first, unless not `tune`)."""
    def loads_at(cap: float) -> list[Load]:
        return [alerts_load(), Load(bulk(), bulk_workload(load * cap))]
    cap = tuned(loads_at, capacity, load, flat_out, log) if tune else capacity
    res = _scenario(lambda: loads_at(cap), MODES, warmup, seconds, log=log, load=load, turn=turn,
                    flat_out=flat_out)
    res["multi"] = {"load": load, "bulk_offered_eps": load * cap}
    return res


def spike(capacity: float, warmup: float, seconds: float, load: float = 0.6, factor: float = 4.0,
          every_s: float = 6.0, spike_s: float = 1.0, log: Any = print, turn: int = 0,
          flat_out: float = 1.0) -> dict[str, Any]:
    """multi with bulk at `load` of capacity, offered `factor` x that for `spike_s` s every
    `every_s` s (the first spike starts at every_s - spike_s). The defaults overload the pool
    2.4x during a spike and leave it time to drain before the next: a transient, not a new level."""
    def loads() -> list[Load]:
        return [alerts_load(), Load(bulk(), bulk_workload(load * capacity, profile="bursty",
                                                              burst_factor=factor, burst_every_s=every_s,
                                                              burst_s=spike_s))]
    # The load it states: the mean offered, at most the pool's capacity.
    mean = min(1.0, load * (every_s - spike_s + factor * spike_s) / every_s)
    res = _scenario(loads, MODES, warmup, seconds, log=log, load=mean, turn=turn, flat_out=flat_out)
    res["spike"] = {"load": load, "factor": factor, "every_s": every_s, "spike_s": spike_s,
                    "mean_load": mean}
    return res


def fair(capacity: float, seconds: float, stagger_s: float = 3.0, weights: tuple[float, ...] = (1, 1, 2),
         offered: float = 1.0, log: Any = print, turn: int = 0, flat_out: float = 1.0) -> dict[str, Any]:
    """Three bulk tenants a, b, c (weights 1, 1, 2), started `stagger_s` apart, each offered
    `offered` x capacity; fifo vs fair_share. Runs 2 x stagger_s + `seconds` (all three
    active for the last `seconds`), measured from the start; final shares over the last part."""
    names = ("a", "b", "c")

    def loads() -> list[Load]:
        return [Load(bulk(f"bulk-{t}", t, w), bulk_workload(offered * capacity, seed=10 + i),
                     start_s=i * stagger_s)
                for i, (t, w) in enumerate(zip(names, weights, strict=True))]
    total = 2 * stagger_s + seconds
    res = _scenario(loads, FAIR_MODES, 0.0, total, sample_s=1.0, log=log,
                    load=len(names) * offered, turn=turn, flat_out=flat_out)
    for mode in FAIR_MODES:
        dfs = res[mode]["dataflows"]
        tail = max(1, int(seconds) - 1)  # whole seconds with all three pushing
        # Shares of executor time, what fair_share divides (events in follow from backpressure).
        sums = {n: sum(d["busy_series_ms"][-tail:]) for n, d in dfs.items()}
        tot = sum(sums.values()) or 1.0
        for n, d in dfs.items():
            d["share"] = sums[n] / tot
        w = {f"bulk-{t}": wt for t, wt in zip(names, weights, strict=True)}
        res[mode]["final_shares"] = {n: round(sums[n] / tot, 4) for n in dfs}
        res[mode]["weight_shares"] = {n: w[n] / sum(weights) for n in dfs}
        log(f"  {mode:9s} ({FAIR_MODES[mode]['policy']}) final shares "
            + ", ".join(f"{n} {s:.0%}" for n, s in res[mode]["final_shares"].items()))
    res["fair"] = {"weights": dict(zip(names, weights, strict=True)), "stagger_s": stagger_s,
                   "offered_each_eps": offered * capacity,
                   "modes_note": "the 'cameo' slot runs policy fair_share"}
    return res


def latency_sensitive(name: str, target_ms: float, seed: int, rate: float = 500.0) -> Load:
    """An alerts-like dataflow (source -> filter -> sink) of its own tenant, `rate` ev/s."""
    flow = (Dataflow(name, latency_target_ms=target_ms, tenant=name)
            .source("s", schema=SCHEMA, event_time="ts").filter("value >= 0").sink("o"))
    return Load(flow, Workload(rate, RUN_S, seed=seed, keys=10, period_s=0.01), latency_sensitive=True)


#: The overload mix: latency-sensitive tenants (target ms) and bulk tenants (target ms, weight).
OVERLOAD_SENSITIVE = (("alerts-20", 20.0), ("alerts-50", 50.0), ("alerts-150", 150.0))
OVERLOAD_BULK = (("bulk-1s", 1000.0, 1.0), ("bulk-3s", 3000.0, 2.0))


def fairness(res: dict[str, Any], modes: dict[str, Any], weights: dict[str, float], seconds: float,
             log: Any = print) -> None:
    """Per dataflow of each mode's run (sampled every second): `share`, its part of the
    executor time the mode handed out over the measured seconds, and `fair_share`, what
    weighted max-min fairness would give it of that time for the demand it was offered
    (offered events/s x its executor ms per event, each tenant's weight); `share_of_fair`
    = share / fair_share, at most 1 (it got all it asked: below capacity, every tenant
    whose backlog does not grow). Per mode, `min_share_of_fair`; 0.8 is the goal."""
    tail = max(1, int(seconds) - 1)  # whole seconds with every tenant pushing
    busy = {m: {n: sum(d["busy_series_ms"][-tail:]) for n, d in res[m]["dataflows"].items()}
            for m in modes}
    events = {m: {n: sum(d["throughput_series_eps"][-tail:]) for n, d in res[m]["dataflows"].items()}
              for m in modes}
    for mode in modes:
        dfs = res[mode]["dataflows"]
        demand = {}
        for n, d in dfs.items():
            # Executor ms per event as measured in this mode; a tenant starved here is
            # costed as in the modes where it ran.
            costs = [busy[m][n] / events[m][n] for m in modes if events[m][n] > 100]
            own = busy[mode][n] / events[mode][n] if events[mode][n] > 100 else None
            cost = own if own is not None else statistics.median(costs) if costs else 0.0
            demand[n] = d["offered_eps"] * tail * cost
        # The executor time this mode handed out, divided by weighted max-min fairness.
        handed_out = sum(busy[mode].values())
        fair = fair_allocation(handed_out, demand, weights)
        for n, d in dfs.items():
            d["share"] = busy[mode][n] / handed_out if handed_out else 0.0
            d["fair_share"] = fair[n] / handed_out if handed_out else 0.0
            d["share_of_fair"] = min(1.0, busy[mode][n] / fair[n]) if fair[n] else None
        res[mode]["min_share_of_fair"] = min(
            (d["share_of_fair"] for d in dfs.values() if d["share_of_fair"] is not None),
            default=None)
        log(f"  {mode:9s} share of its fair share: " + ", ".join(
            f"{n} {d['share_of_fair']:.0%}" for n, d in dfs.items() if d["share_of_fair"] is not None))


def overload(capacity: float, warmup: float, seconds: float, levels: tuple[float, ...] = (0.9, 1.2, 1.5),
             log: Any = print, turn: int = 0, flat_out: float = 1.0) -> dict[str, Any]:
    """Three latency-sensitive tenants (targets 20, 50, 150 ms; 500 ev/s each) beside two bulk
    tenants with 1 s windows (targets 1 s and 3 s, weights 1 and 2), the bulk ones offered
    together `level` x capacity, for each level under fifo, cameo and floor.

    Per dataflow, its share of the executor time against its weighted fair share
    (`fairness`).
    """
    out: dict[str, Any] = {"levels": {}, "ratios": {}}
    for i, level in enumerate(levels):
        def loads(level: float = level) -> list[Load]:
            sensitive = [latency_sensitive(n, t, seed=20 + i) for i, (n, t) in enumerate(OVERLOAD_SENSITIVE)]
            heavy = [Load(bulk(n, n, w, target_ms=t),
                          bulk_workload(level * capacity / len(OVERLOAD_BULK), seed=30 + i))
                     for i, (n, t, w) in enumerate(OVERLOAD_BULK)]
            return sensitive + heavy
        log(f"overload at {level:.0%} of capacity:")
        # Each level starts from another mode (and each run from another again).
        res = _scenario(loads, OVERLOAD_MODES, warmup, seconds, sample_s=1.0, log=log, load=level,
                        turn=turn + i, flat_out=flat_out)
        weights = {n: 1.0 for n, _ in OVERLOAD_SENSITIVE} | {n: w for n, _, w in OVERLOAD_BULK}
        fairness(res, OVERLOAD_MODES, weights, seconds, log)
        out["levels"][f"{level:.2f}"] = res
    out["overload"] = {"levels": list(levels), "sensitive": dict(OVERLOAD_SENSITIVE),
                       "bulk": {n: {"target_ms": t, "weight": w} for n, t, w in OVERLOAD_BULK}}
    return out


#: The modes of a mix: the default against deadline order alone, fifo, the default with
#: late work yielding to all work due within one of its targets (the rule before a late
#: backlog's slack shrank with its age), and the default placing each dataflow on the
#: least loaded executor whatever the targets there (the placement before).
MIX_MODES = OVERLOAD_MODES | {"floor_yield": dict(policy="cameo", isolation="shared", tenant_floor=True,
                                                  policy_params={"late_slack_floor": 1.0}),
                              "floor_even": dict(policy="cameo", isolation="shared", tenant_floor=True,
                                                 placement="even")}


#: A mix's capacity is searched for between these shares of what bulk alone sustains
#: (`sustainable`), in this many probes of `MIX_PROBE_S` each; a probe keeps up when its
#: bulk takes in at least `KEPT_UP` of what it is offered and its results' p99 is within
#: its target. (Intake alone does not tell: the sources' buffers take in what the pool
#: does not run, for seconds; probes of 4 s with a p99 within twice the target found rates
#: 20-40% above what 20 s runs kept up with. And not more than 90%: the feeders, threads of
#: one process on a machine whose cores the pool keeps busy, fell 5-10% behind the rate
#: offered at every probe of the issue's mix, the lowest included.)
MIX_RANGE, MIX_PROBES, MIX_PROBE_S, KEPT_UP, BOUNDED = (0.1, 1.0), 4, 8.0, 0.9, 1.0


def sustainable(loads_at: Callable[[float], list[Load]], capacity: float, probe_s: float = MIX_PROBE_S,
                log: Any = print) -> dict[str, Any]:
    """The bulk rate a mix keeps up with beside its other tenants, under the default: found
    by bisection over `MIX_RANGE` x `capacity` (what bulk alone sustains), each probe run
    for `probe_s` after a warm-up of half that, and kept up with when its bulk took in
    `KEPT_UP` of the rate offered with its p99 within `BOUNDED` x its target. Returns "eps"
    (the highest rate kept up with) and the probes. (Offered more, a pool shows what
    overload leaves of its capacity, not the capacity; the executors' busy share hardly
    moves near saturation; and the CPU of a mix of small calls is no line in its bulk rate:
    idle executors pay more per call than busy ones. Offered 70% of what bulk alone takes
    in, the issue's mix was saturated.)"""
    lo, hi = MIX_RANGE
    probes = []
    for _ in range(MIX_PROBES):
        share = (lo + hi) / 2
        probe = run(loads_at(share * capacity), "probe", MODES["floor"], probe_s / 2, probe_s)
        bulk = [d for d in probe["dataflows"].values() if not d["latency_sensitive"]]
        taken = sum(d["throughput_eps"] for d in bulk)
        worst = max(d.get("p99_ms", math.inf) / d["target_ms"] for d in bulk)
        kept = taken >= KEPT_UP * share * capacity and worst <= BOUNDED
        probes.append({"offered_eps": share * capacity, "taken_eps": taken, "kept_up": kept,
                       "p99_over_target": worst, "cores": probe["cpu"]["cores_busy"]})
        lo, hi = (share, hi) if kept else (lo, share)
    eps = lo * capacity
    log("  probes (offered -> taken in, bulk p99 / target, cores busy): " + ", ".join(
        f"{p['offered_eps']:,.0f} -> {p['taken_eps']:,.0f} ({p['p99_over_target']:.1f}x, "
        f"{p['cores']:.2f})" for p in probes)
        + f"; it keeps up with {eps:,.0f} bulk ev/s, {lo:.0%} of what bulk alone takes in")
    return {"eps": eps, "share_of_bulk_alone": lo, "probes": probes}


#: The skew scenario's input: this many sources, each this much behind the one before in
#: event time (the last one 750 ms), into windows this long: the Cameo paper's
#: single-tenant shape, many upstream tasks whose event times progress apart. It is offered
#: these shares of what bulk alone takes in flat out, each level stating its executors'
#: busy share: the ratio grows with the load, and neither a line through two probes
#: (`tuned`: offered 89% of it, the pool saturated) nor the rate it keeps up with
#: (`sustainable`: 16,000-30,000 events/s in runs minutes apart) put it at one load twice.
SKEW_SOURCES, SKEW_MS, SKEW_WINDOW_MS, SKEW_LEVELS = 4, 250.0, 250, (0.3, 0.45, 0.55)


def skew(capacity: float, warmup: float, seconds: float, levels: tuple[float, ...] = SKEW_LEVELS,
         log: Any = print, turn: int = 0, flat_out: float = 1.0) -> dict[str, Any]:
    """One keyed window fed by `SKEW_SOURCES` sources, offered each of `levels` x `capacity`
    (bulk alone's), in two shapes one after the other in the same run: "in_order" (the
    sources' event times together) and "skewed" (each `SKEW_MS` behind the one before). A
    window then fires when its last source passes its end, and deadline order runs that
    source's work, due first, before the others' work for later windows; fifo runs it in
    turn with theirs. With the event times together there is little to reorder. The
    scenario's ratios are its highest level's, skewed."""
    def loads(rate: float, skew_ms: float) -> list[Load]:
        flow = skewed_bulk(sources=SKEW_SOURCES, window_ms=SKEW_WINDOW_MS)
        return [Load(flow, bulk_workload(rate), latency_sensitive=True, skew_ms=skew_ms)]
    out: dict[str, Any] = {"levels": {}}
    for j, level in enumerate(levels):
        shapes = {}
        for i, (shape, skew_ms) in enumerate((("in_order", 0.0), ("skewed", SKEW_MS))):
            log(f"  {level:.0%} of capacity, {shape}:")
            shapes[shape] = _scenario(lambda r=level * capacity, s=skew_ms: loads(r, s), OVERLOAD_MODES,
                                      warmup, seconds, log=log, turn=turn + i + j, flat_out=flat_out)
        out["levels"][f"{level:.2f}"] = {"shapes": shapes, "ratios": shapes["skewed"]["ratios"]}
    out["ratios"] = out["levels"][f"{levels[-1]:.2f}"]["ratios"]
    out["skew"] = {"levels": list(levels), "bulk_alone_eps": capacity, "sources": SKEW_SOURCES,
                   "skew_ms": SKEW_MS, "window_ms": SKEW_WINDOW_MS}
    return out


def mix(capacity: float, warmup: float, seconds: float, tenants: tuple[mixes.Tenant, ...],
        load: float = 0.95, log: Any = print, turn: int = 0, flat_out: float = 1.0,
        probe_s: float = MIX_PROBE_S, modes: tuple[str, ...] = tuple(MIX_MODES)) -> dict[str, Any]:
    """`tenants` (`bench.mixes`) together, their bulk offered `load` x the mix's capacity
    (`sustainable`, measured first), under `modes` (of `MIX_MODES`: fifo, cameo, floor, floor_yield and floor_even); per tenant its
    share within target and its share of executor time against its weighted fair share
    (`fairness`), and per mode the worst of both (`worst_within_target`,
    `min_share_of_fair`); the latency-sensitive tenants' late results' critical paths in
    words (`run`'s `explain`)."""
    def loads_at(bulk_eps: float) -> list[Load]:
        return mixes.loads(tenants, bulk_eps)
    cap = sustainable(loads_at, capacity, probe_s, log)
    run_modes = {m: MIX_MODES[m] for m in modes}
    res = _scenario(lambda: loads_at(load * cap["eps"]), run_modes, warmup, seconds, sample_s=1.0,
                    log=log, turn=turn, flat_out=flat_out, explain=True)
    fairness(res, run_modes, {t.name: t.weight for t in tenants}, seconds, log)
    for mode in run_modes:
        dfs = res[mode]["dataflows"]
        res[mode]["worst_within_target"] = min(d.get("within_target", 0.0) for d in dfs.values())
    res["mix"] = {"load": load, "capacity": cap, "bulk_offered_eps": load * cap["eps"],
                  "bulk_alone_eps": capacity,
                  "tenants": [dict(vars(t)) for t in tenants]}
    return res


def random_mixes(capacity: float, warmup: float, seconds: float, seeds: list[int], log: Any = print,
                 turn: int = 0, flat_out: float = 1.0, probe_s: float = MIX_PROBE_S, modes: tuple[str, ...] = tuple(MIX_MODES)) -> dict[str, Any]:
    """A `mix` per seed, drawn by `mixes.random_mix` at the load it draws; per mode the
    worst tenant of any mix: its share within target, and its share of its fair share."""
    out: dict[str, Any] = {"mixes": {}}
    for i, seed in enumerate(seeds):
        tenants, load = mixes.random_mix(seed)
        log(f"random mix {seed}: " + ", ".join(
            f"{t.name} (w {t.weight:g}{', share ' + str(t.share) if not t.sensitive else ''})"
            for t in tenants) + f" at {load:.0%}")
        out["mixes"][str(seed)] = mix(capacity, warmup, seconds, tenants, load, log=log,
                                      turn=turn + i, flat_out=flat_out, probe_s=probe_s,
                                      modes=modes)
    out["worst"] = {m: {k: min(r[m][k] for r in out["mixes"].values() if r[m][k] is not None)
                        for k in ("worst_within_target", "min_share_of_fair")}
                    for m in modes}
    out["seeds"], out["ratios"] = seeds, {}
    log("  worst of the random mixes: " + "; ".join(
        f"{m} {w['worst_within_target']:.1%} within target, {w['min_share_of_fair']:.0%} of fair"
        for m, w in out["worst"].items()))
    return out


MEDIAN_FIELDS = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "within_target", "throughput_eps",
                 "p50_from_event_ms", "p99_from_event_ms", "within_target_from_event", "share",
                 "fair_share", "share_of_fair")


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated runs of one scenario -> one result: medians of each figure over the runs, the
    ratios' median and spread (min, max). Series, CDFs and shares over time are the first run's."""
    if len(runs) == 1:
        return runs[0]
    if "mixes" in runs[0]:  # random: each mix on its own
        return {**runs[0], "mixes": {s: combine([r["mixes"][s] for r in runs]) for s in runs[0]["mixes"]},
                "worst": {m: {k: min(r["worst"][m][k] for r in runs) for k in runs[0]["worst"][m]}
                          for m in runs[0]["worst"]}, "runs": len(runs)}
    for part in ("levels", "shapes"):  # overload's and skew's levels, skew's shapes: apart
        if part in runs[0]:
            parts = {k: combine([r[part][k] for r in runs]) for k in runs[0][part]}
            out = {**runs[0], part: parts, "runs": len(runs)}
            if part == "shapes" or "skew" in runs[0]:  # skew's ratios: its highest level's, skewed
                top = parts["skewed"] if part == "shapes" else parts[max(parts, key=float)]
                out["ratios"], out["ratios_spread"] = top["ratios"], top["ratios_spread"]
            return out
    out = dict(runs[0])
    refused = [r.get("load_refused") for r in runs]
    out.pop("load_refused", None)
    if any(refused):  # the runs not at the stated load, and why (their ratios left out)
        out["load_refused_runs"] = refused
    for mode, first in runs[0].items():
        if not isinstance(first, dict) or "dataflows" not in first:
            continue
        m = out[mode] = dict(first, dataflows={n: dict(d) for n, d in first["dataflows"].items()})
        m["utilization"] = statistics.median(r[mode]["utilization"] for r in runs)
        for worst in ("min_share_of_fair", "worst_within_target"):  # the worst of any run
            if worst in first:
                m[worst] = min((r[mode][worst] for r in runs if r[mode][worst] is not None),
                               default=None)
        for name, d in m["dataflows"].items():
            for f in MEDIAN_FIELDS:
                vals = [r[mode]["dataflows"][name][f] for r in runs
                        if r[mode]["dataflows"][name].get(f) is not None]
                if len(vals) == len(runs):
                    d[f] = statistics.median(vals)
                    d[f + "_runs"] = vals
        if "final_shares" in first:
            m["final_shares"] = {n: d["share"] for n, d in m["dataflows"].items()}
    out["ratios"], out["ratios_spread"] = {}, {}
    for k in runs[0]["ratios"]:
        vals = [r["ratios"][k] for r in runs if r["ratios"].get(k) is not None]
        out["ratios"][k] = statistics.median(vals) if vals else None
        out["ratios_spread"][k] = [min(vals), max(vals)] if vals else None
    out["ratios_runs"] = [r["ratios"] for r in runs]
    if "mix" in runs[0]:  # each run of a mix found its own capacity: each one's, and its load
        out["mix_runs"] = [r["mix"] for r in runs]
    out["runs"] = len(runs)
    return out
