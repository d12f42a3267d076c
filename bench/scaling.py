"""Self-scaling: DS2 against a threshold rule on a rate that steps up and down, and lessees
for a hot key.

Run: `python -m bench.scaling [--quick | --smoke] [--json FILE] [--plots DIR]
      [--policies ds2,threshold] [--parts steps,hot,capped] [--capacity EPS]
      [--no-deadline-aware]`

The figure of docs/benchmarks.md: `python -m bench.scaling --json bench/out/scaling.json --plots docs/bench`
(`make bench`), which writes `docs/bench/scaling.png`.

Simulated speed. A two-core machine cannot show real scale-out, so each keyed instance is
given a fixed service capacity, the same for every policy: `RuntimeConfig(
service_capacity_eps=C)` (C = 1,000 events/s unless `--capacity`), each instance of a keyed
step (here the window) takes at most C events/s and sleeps the rest of each event's share.
An instance on an added executor therefore adds C events/s, as a machine would on a
cluster. Every other step runs as fast as this machine does. An instance's simulated
clock runs on from its last message's due end, so a sleep that overran is taken off the
next one and its measured rate (`true_processing_eps` in the timeline) stays near C. Buffers
(`credit_events`, `ingress_events`) hold about two seconds of one instance's work
(`buffer_events`), as buffers sized to the 2 s target would: a rescale's in-band marker
waits behind what is queued.

The scaled dataflow, "bids" (tenant auctions, target 2 s), Nexmark-like: source "events"
({ts, auction, price, n}) -> flat_map `bench.scaling:explode` (each event is `n` = 3 bids
on its auction, prices price, price + 1, price + 2) -> key_by(auction) -> a 1 s tumbling
window `w` (bids = count, volume = sum of price) -> sink "out". Auctions are uniform over
1,000. Next to it, on the same pool, the latency-sensitive "alerts"
(`cameo_actors.examples.alerts_dataflow`: filter + map, target 50 ms, tenant ops) gets a
steady 500 events/s from `bench.harness.feeds.AlertFeed` all the time.

Scenario 1, "steps" (per policy, ds2 then threshold, each on a fresh pool of 2 executors,
`Runtime.start` ... `shutdown`): the window starts at 1 instance; bounds 1-5 executors
(two cores host Ray, the driver and the executors), 1-6 instances per step. The input
rate steps through r0, 2 r0, 4 r0, 2 r0, r0 (`phase_s` each: 40 s, `--quick` 20 s,
`--smoke` 1.5 s), r0 = 7/30 C rounded down to 10 events/s: the window's 3 r0 events/s need
0.875 instances at utilization 0.8, so the steps land mid-way (1.75 -> 2, 3.5 -> 4) and
noise in measured rates does not tip a ceiling. The optimum of a phase is
ceil(3 r / (0.8 C)): 1, 2, 4, 2, 1. Both policies get the same guard rails, scaled to the
phase: warm-up after an action `warmup_s` (6 s; quick 4 s), delayed scale-down
`scale_down_window_s` (15 s; quick 8 s), rates over `rate_window_s` (5 s; quick 3 s), a
decision every `interval_s` (1 s), the scaler's deadline awareness on (its default: a
dataflow missing its target is not scaled down, and gets +1 where busiest when the policy
adds nothing; `--no-deadline-aware` turns it off, to see the policies alone); ds2 at target utilization 0.8, threshold at the policy's default busy
thresholds (high 0.8, low 0.3); lessees off.

Input: a generator thread on a fixed schedule: event k is produced when the trace's
cumulative rate reaches k, and that moment is its event time `ts` (ms since the epoch),
whether or not the runtime takes it then; events that wait at the generator (backpressure)
are its lag, which it reports every 0.2 s with `Runtime.report_backlog` (so DS2 sees the
offered rate even while the source is held back). Watermarks follow event time (allowed
lateness 0). At the end scaling is switched off for bids (`set_scaling(..., {"policy":
"off"})`, any migration finished), the input is closed, every result read and compared
with `run_local`'s engine (`cameo_actors.testing.LocalEngine`) on the same events: equal
as multisets of rows (row count and an order-independent hash, `bench.harness.
fingerprint.Fingerprint`). A mismatch is printed loudly and the command exits 1.

Samples every 0.5 s (`timeline`): `t_s` (from the start of the trace), `offered_eps` (the
trace's rate), `parallelism` (instances of `w` in `describe()["hosts"]`, lessees left
out), `executors` and `wanted_executors` (`scaling()`), `lag_events` (the generator's
lag), `pool_backlog` (the sum of `executor_stats()` backlogs: messages queued, as the
runtime counts them), `busy`, `true_processing_eps` and `events_in_eps` of `w` when the
controller has measured them. Decisions are the controller's (`scaling()["decisions"]` of kind
parallelism for `w`), each stamped `seen_s` with this process's clock when first seen.

Figures per policy (`policies.<policy>`):
- `optimum`: the optimum parallelism per phase (above); `rates_eps`: the phase's rate.
- `decisions`: per phase, the scaling actions seen in it (from, to, reason, seen_s): those
  until the parallelism stayed put for the rest of the phase; `actions` their numbers;
  `deadline_actions` how many of them the scaler's deadline rule made, not the policy.
- `seconds_to_converge`: per phase, from the rate change to the last change of the
  parallelism seen in that phase (0 if none was needed or made).
- `settled`: the parallelism at the end of each phase; `overshoot`: max(0, settled -
  optimum); `at_optimum`: settled == optimum.
- `oscillations`: reversals of direction the trace does not explain: within each phase,
  a change against the previous change or, for its first change, against the direction
  of the rate step (a phase whose rate did not change has no direction). `reversals`:
  every reversal of direction over the run (the trace itself has one).
- `backlog_max_events`: the largest `lag_events + pool_backlog` sampled;
  `lag_max_events` the generator's lag alone.
- `within_target`: the share of alerts' results (ingested during the trace) within their
  50 ms target (egress - ingest); `alerts_within_target_runtime` the runtime's own
  figure (`stats("alerts")`).
- `p99_ms_per_s`: [second, p99] of bids' result latency per second of egress, latency =
  egress - window_end (the moment the generator produced the first event that made the
  window computable, so waiting at the generator counts); `p99_ms` over the run.
- `results_equal` (with `result_rows`, `expected_rows`), `events`, `scaling_errors`,
  `misses`, `timeline`.
`summary`: per policy total actions, most actions in one phase, those of the deadline
rule, oscillations, phases settled at the optimum, summed seconds to converge, overshoot.

Scenario 2, "hot" (policy "off"): a pool of 3 executors, the window at parallelism 2,
auction 0 takes `hot_share` (50%) of the events, the rest Zipf (s = 1) over the other
999; the generator pushes a fixed volume flat out (ts = now): `hot_s` seconds (30 s; quick
15 s; smoke 2 s) of the window's nominal capacity, hot_s x 2 C / 3 events, the same in
both runs; the pool holds at most 3,000 events at a source and per channel, so the
close drains in seconds. Once without and once with one lessee (`rt.lease("bids", "w",
1)` right after the deploy: an instance on another executor that takes events the hot
key's owner cannot start in time and merges its partial aggregates into it before
windows fire). Figures per run: `throughput_eps` (events / seconds from the first push to
the last result's egress, after the close), `p99_ms` of every result's latency,
`results_equal`; `lessee_speedup` = throughput with / without (goal >= 1.5). Without
`Runtime.lease`, `lessees` says "not available in this runtime".

Goals (printed met / not met, not asserted): ds2 converges in at most 2 actions per rate
step, with no oscillation, and ahead of threshold (settled at the optimum in at least as
many phases, with no more actions and no more instances above the optimum; the seconds to
converge are reported, not compared: a policy that stays above the optimum converges in
0 s); lessee speedup >= 1.5.

Scenario 3, "capped" (policy ds2): the scaling loop must pay off where each executor's
capacity is capped. The window is offered 3 C events/s (C input events/s, 3 bids each),
three times what one instance takes, for `capped_s` (60 s; quick 30 s; smoke 3 s), on a
pool that starts with one executor and the window at one instance; the guard rails of
scenario 1. Figures (`capped`): the decisions, `actions`, `oscillations`, `settled` (the
optimum is ceil(3 C / 0.8 C) = 4), `seconds_to_rate` (the first sample after which
nothing waits at the generator: its lag stays under one push), the window's measured
events/s at each parallelism (`window_eps_by_parallelism`; one instance's per useful
second: `instance_eps_by_parallelism`), `p99_within_target_from_s` (the second from which the
window's per-second p99 stays within its 2 s target), and `results_match` (run_local's).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import threading
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.harness.cluster import ensure_ray, wait_finished
from bench.harness.feeds import AlertFeed
from bench.harness.fingerprint import Fingerprint
from bench.harness.output import format_ms, save_json
from bench.harness.results import Latencies, Reader
from bench.harness.stats import quantile
from bench.harness.threads import check_threads, stop_threads
from cameo_actors import Dataflow, count, sum_
from cameo_actors.examples import alerts_dataflow

BIDS, SOURCE, STEP, SINK = "bids", "events", "w", "out"
ALERTS, ALERTS_SINK = "alerts", "alerts"
SCHEMA = {"ts": "int", "auction": "int", "price": "int", "n": "int"}
BIDS_PER_EVENT = 3
TARGET_MS = 2_000
ALERTS_TARGET_MS = 50.0
#: Rate steps, as multiples of the base rate r0.
STEPS = (1, 2, 4, 2, 1)
POLICIES = ("ds2", "threshold")
PARTS = ("steps", "hot", "capped")
#: Events per push call of the generator.
PUSH_EVENTS = 1_000
SAMPLE_S = 0.5
BACKLOG_REPORT_S = 0.2
NOT_AVAILABLE = "not available in this runtime"


def explode(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat_map: one input event is `n` bids on its auction, prices price, price + 1, ...

    >>> explode({"ts": 5, "auction": 7, "price": 10, "n": 2})
    [{'ts': 5, 'auction': 7, 'price': 10}, {'ts': 5, 'auction': 7, 'price': 11}]
    """
    return [{"ts": e["ts"], "auction": e["auction"], "price": e["price"] + i}
            for i in range(e["n"])]


def bids_dataflow(parallelism: int = 1) -> Dataflow:
    """The scaled dataflow: explode, key by auction, a 1 s tumbling count and volume."""
    return (Dataflow(BIDS, latency_target_ms=TARGET_MS, tenant="auctions")
            .source(SOURCE, schema=SCHEMA, event_time="ts")
            .flat_map("bench.scaling:explode", id="explode")
            .key_by("auction", id="by_auction")
            .window(tumbling_ms=1_000, id=STEP, parallelism=parallelism)
            .aggregate(bids=count(), volume=sum_("price"))
            .sink(SINK))


@dataclass(frozen=True)
class Setup:
    """One run's shape (`full()`, `quick()` or `smoke()`)."""

    phase_s: float
    warmup_s: float
    scale_down_window_s: float
    rate_window_s: float
    hot_s: float
    interval_s: float = 1.0
    deadline_aware: bool = True
    capacity_eps: float = 1_000.0
    target_utilization: float = 0.8
    threshold_high: float = 0.8
    threshold_low: float = 0.3
    start_executors: int = 2
    max_executors: int = 5
    max_parallelism: int = 6
    auctions: int = 1_000
    alerts_eps: float = 500.0
    hot_executors: int = 3
    hot_parallelism: int = 2
    hot_share: float = 0.5
    #: what the pool holds at a source and per channel (events): about two seconds of one
    #: instance's work, as buffers sized to a 2 s target would be. Larger, a rescale's
    #: in-band marker waits behind that much queue (and the hot pool's close after a
    #: flat-out run drains longer).
    buffer_events: int = 2_000
    hot_buffer_events: int = 3_000
    drain_timeout_s: float = 180.0
    seed: int = 7
    #: the capped part: how long the window is offered 3x one instance's capacity
    capped_s: float = 60.0

    @classmethod
    def full(cls) -> Setup:
        return cls(phase_s=40.0, warmup_s=6.0, scale_down_window_s=15.0, rate_window_s=5.0,
                   hot_s=30.0)

    @classmethod
    def quick(cls) -> Setup:
        return cls(phase_s=20.0, warmup_s=4.0, scale_down_window_s=8.0, rate_window_s=3.0,
                   hot_s=15.0, capped_s=30.0)

    @classmethod
    def smoke(cls) -> Setup:
        """The plumbing only: the whole run (both policies, both hot runs) under a minute."""
        return cls(phase_s=1.5, warmup_s=1.0, scale_down_window_s=1.0, rate_window_s=1.0,
                   hot_s=2.0, interval_s=0.5, drain_timeout_s=60.0, capped_s=3.0)

    @property
    def hot_events(self) -> int:
        """Events a hot-key run pushes: `hot_s` seconds at the window's nominal capacity
        (C per instance, 3 bids per event)."""
        return int(self.hot_s * self.capacity_eps * self.hot_parallelism / BIDS_PER_EVENT)

    @property
    def base_eps(self) -> float:
        """r0: 7/30 C, rounded down to 10 events/s."""
        return max(10.0, math.floor(self.capacity_eps * 7 / 30 / 10) * 10)

    def trace(self) -> Trace:
        return Trace(tuple((m * self.base_eps, self.phase_s) for m in STEPS))

    def optimum(self, rate_eps: float) -> int:
        """Instances of the window the rate needs at the target utilization."""
        need = math.ceil(BIDS_PER_EVENT * rate_eps / (self.capacity_eps * self.target_utilization)
                         * (1 - 1e-9))
        return min(self.max_parallelism, max(1, need))

    def scaling(self, policy: str) -> dict[str, Any]:
        """`RuntimeConfig.scaling` for `policy`: the same guard rails for both policies."""
        common = {"policy": policy, "min_executors": 1, "max_executors": self.max_executors,
                  "min_parallelism": 1, "max_parallelism": self.max_parallelism,
                  "warmup_s": self.warmup_s, "scale_down_window_s": self.scale_down_window_s,
                  "interval_s": self.interval_s, "rate_window_s": self.rate_window_s,
                  "deadline_aware": self.deadline_aware, "lessees": False}
        if policy == "ds2":
            return {**common, "target_utilization": self.target_utilization}
        if policy == "threshold":
            return {**common, "high": self.threshold_high, "low": self.threshold_low}
        return {"policy": policy}


# -- the trace (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Trace:
    """Piecewise-constant input rates: (events/s, seconds) per phase, back to back.

    Event k is produced when the cumulative rate reaches k: event 0 at 0 s.

    >>> t = Trace(((10.0, 1.0), (20.0, 1.0)))
    >>> t.total, t.produced_at(0), t.produced_at(10), t.produced_at(15), t.due(0.55)
    (30, 0.0, 1.0, 1.25, 6)
    """

    phases: tuple[tuple[float, float], ...]

    @property
    def seconds(self) -> float:
        return sum(d for _, d in self.phases)

    @property
    def total(self) -> int:
        """Events in the whole trace."""
        return math.ceil(sum(r * d for r, d in self.phases) - 1e-9)

    def bounds(self) -> list[tuple[float, float]]:
        """(start s, end s) of each phase."""
        ends = list(itertools.accumulate(d for _, d in self.phases))
        return list(zip([0.0, *ends[:-1]], ends, strict=True))

    def rate_at(self, t: float) -> float:
        """The offered rate t seconds in (0 outside the trace)."""
        for (r, _), (a, b) in zip(self.phases, self.bounds(), strict=True):
            if a <= t < b:
                return r
        return 0.0

    def produced_by(self, t: float) -> float:
        """Cumulative events produced by t (continuous)."""
        done = 0.0
        for (r, _), (a, b) in zip(self.phases, self.bounds(), strict=True):
            done += r * (min(t, b) - a) if t > a else 0.0
        return done

    def due(self, t: float) -> int:
        """Events produced at or before t."""
        if t < 0:
            return 0
        return min(self.total, math.floor(self.produced_by(t) + 1e-9) + 1)

    def produced_at(self, k: int) -> float:
        """When event k is produced (seconds from the start)."""
        before = 0.0
        for (r, d), (a, _) in zip(self.phases, self.bounds(), strict=True):
            if k < before + r * d - 1e-9:
                return a + (k - before) / r
            before += r * d
        raise IndexError(f"event {k} is beyond the trace's {self.total} events")


# -- metrics of a timeline (pure) --------------------------------------------------------------
def instances(hosts: Mapping[str, int], name: str, step: str, lessees: int = 0) -> int:
    """Instances of `step` in `describe()["hosts"]` (ids "dataflow/step/instance"), less
    its `lessees`.

    >>> instances({"b/w/0": 0, "b/w/1": 1, "b/out/0": 0, "b/ww/0": 1}, "b", "w")
    2
    """
    prefix = f"{name}/{step}/"
    return sum(1 for aid in hosts if aid.startswith(prefix)) - lessees


def changes(points: Sequence[tuple[float, int]]) -> list[tuple[float, int, int]]:
    """(t, from, to) wherever the parallelism of consecutive samples differs.

    >>> changes([(0, 1), (1, 1), (2, 3), (3, 2)])
    [(2, 1, 3), (3, 3, 2)]
    """
    return [(t, p0, p) for (_, p0), (t, p) in itertools.pairwise(points) if p != p0]


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def phase_metrics(points: Sequence[tuple[float, int]], bounds: Sequence[tuple[float, float]],
                  optimum: Sequence[int]) -> list[dict[str, Any]]:
    """Per phase: the changes seen in it, seconds from its start to the last, the
    parallelism it ended at, overshoot over the optimum.

    >>> pts = [(0, 1), (1, 1), (2, 2), (3, 2), (4, 2), (5, 4), (6, 3)]
    >>> [(m["seconds_to_converge"], m["settled"], m["overshoot"])
    ...  for m in phase_metrics(pts, [(0, 2), (2, 5), (5, 7)], [1, 2, 3])]
    [(0.0, 1, 0), (0.0, 2, 0), (1.0, 3, 0)]
    """
    out = []
    moves = changes(points)
    for (a, b), opt in zip(bounds, optimum, strict=True):
        inside = [m for m in moves if a <= m[0] < b]
        held = [p for t, p in points if t < b]
        settled = held[-1] if held else None
        out.append({"changes": [list(m) for m in inside],
                    "seconds_to_converge": round(float(inside[-1][0] - a), 3) if inside else 0.0,
                    "settled": settled,
                    "overshoot": max(0, settled - opt) if settled is not None else None,
                    "at_optimum": settled == opt})
    return out


def oscillations(per_phase: Sequence[Sequence[Sequence[float]]], optimum: Sequence[int]) -> int:
    """Reversals the trace does not explain: a change against the phase's previous one
    or, for its first, against the direction of the rate step.

    >>> oscillations([[], [(1, 1, 2)], [(2, 2, 5), (3, 5, 4)], [(4, 4, 2)]], [1, 2, 4, 2])
    1
    >>> oscillations([[(0, 1, 2)], [(1, 2, 1)]], [1, 2])
    1
    """
    n = 0
    for k, moves in enumerate(per_phase):
        direction = _sign(optimum[k] - optimum[k - 1]) if k else 0
        for _, p0, p in moves:
            d = _sign(p - p0)
            if direction and d != direction:
                n += 1
            direction = d
    return n


def reversals(moves: Sequence[Sequence[float]]) -> int:
    """Every reversal of direction in a run's changes.

    >>> reversals([(0, 1, 2), (1, 2, 4), (2, 4, 2), (3, 2, 3)])
    2
    """
    dirs = [_sign(p - p0) for _, p0, p in moves]
    return sum(1 for x, y in itertools.pairwise(dirs) if x != y)


def decisions_by_phase(seen: Sequence[Mapping[str, Any]], bounds: Sequence[tuple[float, float]]
                       ) -> list[list[dict[str, Any]]]:
    """The decisions seen in each phase, by `seen_s` (before the trace: the first phase;
    after it: the last).

    >>> [len(p) for p in decisions_by_phase([{"seen_s": -0.1}, {"seen_s": 2}, {"seen_s": 9}],
    ...                                     [(0, 2), (2, 4)])]
    [1, 2]
    """
    out: list[list[dict[str, Any]]] = [[] for _ in bounds]
    for d in seen:
        k = next((i for i, (_, b) in enumerate(bounds) if d["seen_s"] < b), len(bounds) - 1)
        out[k].append(dict(d))
    return out


def per_second(egress_s: Sequence[float], values: Sequence[float], q: float = 0.99
               ) -> list[list[float]]:
    """[second, q-quantile] of `values` per whole second of `egress_s`.

    >>> per_second([0.1, 0.5, 1.2], [10.0, 30.0, 5.0], 0.5)
    [[0, 30.0], [1, 5.0]]
    """
    by: dict[int, list[float]] = {}
    for t, v in zip(egress_s, values, strict=True):
        by.setdefault(math.floor(t), []).append(v)
    return [[s, quantile(v, q)] for s, v in sorted(by.items())]  # type: ignore[misc]


# -- input --------------------------------------------------------------------------------------
class Keys:
    """Auction ids: key 0 takes `hot_share` of the events, the rest Zipf (s = 1) over
    1..auctions-1; uniform over 0..auctions-1 when hot_share is 0."""

    def __init__(self, auctions: int, hot_share: float = 0.0) -> None:
        self.ids = range(auctions)
        if hot_share <= 0:
            weights = [1.0] * auctions
        else:
            tail = [1.0 / i for i in range(1, auctions)]
            weights = [hot_share] + [(1 - hot_share) * w / sum(tail) for w in tail]
        self.cum = list(itertools.accumulate(weights))

    def draw(self, rng: random.Random, n: int) -> list[int]:
        return rng.choices(self.ids, cum_weights=self.cum, k=n)


class Feed(threading.Thread):
    """Pushes bids' events: on `trace`'s schedule (event time = production time, the lag
    reported every 0.2 s with `report_backlog`), or with no trace `limit` events flat out
    (ts = now). Keeps every event's fields, so that the reference can make them again."""

    def __init__(self, rt: Any, keys: Keys, start: float, trace: Trace | None, seed: int,
                 limit: int = 0) -> None:
        super().__init__(daemon=True, name="bids-feed")
        self.rt, self.keys, self.origin, self.trace = rt, keys, start, trace
        self.limit = trace.total if trace is not None else limit
        self.rng = random.Random(seed)
        self.ts, self.auction, self.price = array("q"), array("q"), array("q")
        self.lag_events = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    @property
    def pushed(self) -> int:
        return len(self.ts)

    def _times(self, now: float) -> list[int] | None:
        """The event times (ms) of the next push, None when nothing is due yet."""
        if self.trace is None:
            return [int(now * 1000)] * min(PUSH_EVENTS, self.limit - self.pushed)
        k0, due = self.pushed, self.trace.due(now - self.origin)
        self.lag_events = due - k0
        n = min(PUSH_EVENTS, due - k0)
        # Pushes of at least ~10 ms of events unless a full one is due.
        if n <= 0 or (n < PUSH_EVENTS and now - self.origin - self.trace.produced_at(k0) < 0.01):
            return None
        return [int((self.origin + self.trace.produced_at(k)) * 1000) for k in range(k0, k0 + n)]

    def run(self) -> None:
        report_at = 0.0
        try:
            while not self.stop.is_set():
                if self.pushed >= self.limit:
                    break
                now = time.time()
                times = self._times(now)
                if self.trace is not None and now >= report_at:
                    self.rt.report_backlog(BIDS, SOURCE, self.lag_events)
                    report_at = now + BACKLOG_REPORT_S
                if times is None:
                    time.sleep(0.002)
                    continue
                auctions = self.keys.draw(self.rng, len(times))
                prices = [self.rng.randrange(1, 1_000) for _ in times]
                self.rt.push(BIDS, SOURCE, make_events(times, auctions, prices),
                             batch_size=PUSH_EVENTS)
                self.ts.extend(times)
                self.auction.extend(auctions)
                self.price.extend(prices)
            self.lag_events = 0
            if self.trace is not None:
                self.rt.report_backlog(BIDS, SOURCE, 0)
            self.rt.flush()
        except BaseException as e:  # reported by the main thread
            self.error = e


def make_events(ts: Sequence[int], auctions: Sequence[int], prices: Sequence[int]
                ) -> list[dict[str, Any]]:
    return [{"ts": t, "auction": a, "price": p, "n": BIDS_PER_EVENT}
            for t, a, p in zip(ts, auctions, prices, strict=True)]


class BidResults:
    """Bids' results as a Reader gets them: their fingerprint, and per result its egress
    (wall s), latency (egress - window_end, ms) and bids."""

    def __init__(self) -> None:
        self.fingerprint = Fingerprint()
        self.egress, self.latency, self.bids = array("d"), array("d"), array("q")

    def add(self, sink: str, rows: list[Any]) -> None:
        for ev, _ingest, eg in rows:
            self.fingerprint.add(sink, ev)
            self.egress.append(eg / 1000)
            self.latency.append(eg - ev["window_end"])
            self.bids.append(ev["bids"])


def reference(feed: Feed) -> Fingerprint:
    """Bids' results on the feed's events by `run_local`'s engine, in-process."""
    from cameo_actors.testing import LocalEngine

    engine = LocalEngine(bids_dataflow().spec)
    for i in range(0, feed.pushed, 20_000):
        j = i + 20_000
        engine.push(SOURCE, make_events(feed.ts[i:j], feed.auction[i:j], feed.price[i:j]))
    fp = Fingerprint()
    for row in engine.finish().sinks[SINK]:
        fp.add(SINK, row)
    return fp


def _close_and_read(rt: Any, feed: Feed, reader: Reader, timeout_s: float) -> None:
    """Close bids from the feed's handle (after its pushes), wait until it finished, then
    read its last results."""
    feed.rt.close(BIDS)
    wait_finished(rt, BIDS, timeout_s)
    stop_threads(timeout_s, reader)
    while reader.read_once():
        pass


def _quiesce(rt: Any, timeout_s: float) -> None:
    """Scaling off for bids, and any migration of it finished: the close moves nothing."""
    rt.set_scaling(BIDS, {"policy": "off"})
    for m in rt.migrations(BIDS):
        if m["state"] == "running":
            rt.wait_migration(m["id"], timeout_s)


# -- scenario 1: rate steps -------------------------------------------------------------------
class Sampler:
    """The timeline: a sample every SAMPLE_S, and the controller's decisions for the
    window step, stamped with this process's clock when first seen."""

    def __init__(self, rt: Any, feed: Feed, trace: Trace) -> None:
        self.rt, self.feed, self.trace = rt, feed, trace
        self.samples: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self._known: set[tuple[Any, ...]] = set()
        self.status: dict[str, Any] = {}

    def sample(self) -> dict[str, Any]:
        rt, t = self.rt, time.time() - self.feed.origin
        status = self.status = rt.scaling(BIDS)
        step = status.get("dataflows", {}).get(BIDS, {}).get("steps", {}).get(STEP, {})
        hosts = rt.describe(BIDS, refresh=True)["hosts"]
        for d in status.get("decisions", []):
            key = (d.get("at"), d.get("from_parallelism"), d.get("to_parallelism"), d.get("kind"))
            if (d.get("dataflow") != BIDS or d.get("step") != STEP or key in self._known
                    or d.get("kind", "parallelism") != "parallelism"):
                continue
            self._known.add(key)
            self.decisions.append({**d, "seen_s": round(t, 3)})
        s = {"t_s": round(t, 3), "offered_eps": self.trace.rate_at(t),
             "parallelism": instances(hosts, BIDS, STEP, int(step.get("lessees") or 0)),
             "executors": status.get("executors"),
             "wanted_executors": status.get("wanted_executors"),
             "lag_events": self.feed.lag_events,
             "pool_backlog": sum(e.get("backlog", 0) for e in rt.executor_stats()),
             "busy": step.get("busy"), "true_processing_eps": step.get("true_processing_eps"),
             "events_in_eps": step.get("events_in_eps")}
        self.samples.append(s)
        return s

    def run_until(self, done: Callable[[], bool], deadline: float, *threads: Any) -> None:
        next_at = time.monotonic()
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the generator did not finish its trace by the deadline "
                                   f"(lag {self.feed.lag_events:,} events)")
            check_threads(*threads)
            self.sample()
            next_at += SAMPLE_S
            time.sleep(max(0.0, next_at - time.monotonic()))


def run_policy(s: Setup, policy: str, log: Callable[[str], None] = print,
               trace: Trace | None = None, start_executors: int | None = None
               ) -> dict[str, Any]:
    """Scenario 1 for one policy on a fresh pool: its figures (with `trace` and
    `start_executors`, the same run on another trace: the capped part)."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    trace = trace or s.trace()
    rt = Runtime.start(RuntimeConfig(num_executors=start_executors or s.start_executors,
                                     service_capacity_eps=s.capacity_eps,
                                     credit_events=s.buffer_events,
                                     ingress_events=s.buffer_events,
                                     checkpoint_interval_s=0, scaling=s.scaling(policy)),
                       pool=f"bench-scaling-{policy}")
    try:
        rt.deploy(bids_dataflow())
        rt.deploy(alerts_dataflow())
        rt.scaling(BIDS)  # a runtime without the scaling controller fails here, plainly
        start = time.time() + 0.2
        feed = Feed(rt.handle(), Keys(s.auctions), start, trace, s.seed)
        bids, alerts = BidResults(), Latencies()
        reader = Reader(rt.handle(), BIDS, (SINK,), bids.add)
        alerts_reader = Reader(rt.handle(), ALERTS, (ALERTS_SINK,), alerts.add)
        alerts_feed = AlertFeed(rt.handle(), s.alerts_eps, s.seed)
        threads = (feed, reader, alerts_reader, alerts_feed)
        for th in threads:
            th.start()
        sampler = Sampler(rt, feed, trace)
        sampler.run_until(lambda: not feed.is_alive(),
                          time.monotonic() + trace.seconds + s.drain_timeout_s, *threads)
        check_threads(feed)
        end = start + trace.seconds
        stop_threads(60, alerts_feed)
        status = rt.scaling(BIDS)
        alerts_runtime = rt.stats(ALERTS)["within_target"]
        _quiesce(rt, s.drain_timeout_s)
        _close_and_read(rt, feed, reader, s.drain_timeout_s)
        stop_threads(60, alerts_reader)
    finally:
        rt.shutdown(stop_ray=False)

    expected = reference(feed)
    equal = bids.fingerprint == expected
    bounds = trace.bounds()
    optimum = [s.optimum(r) for r, _ in trace.phases]
    points = [(x["t_s"], x["parallelism"]) for x in sampler.samples]
    phases = phase_metrics(points, bounds, optimum)
    seen = decisions_by_phase(sampler.decisions, bounds)
    inside = [i for i in range(len(alerts.ingest)) if start * 1000 <= alerts.ingest[i] < end * 1000]
    a_lat = [alerts.egress[i] - alerts.ingest[i] for i in inside]
    return {
        "policy": policy, "scaling": s.scaling(policy),
        "rates_eps": [r for r, _ in trace.phases], "phase_bounds_s": bounds,
        "optimum": optimum,
        "decisions": seen, "actions": [len(d) for d in seen],
        "deadline_actions": [sum(1 for d in ds if str(d.get("reason", "")).startswith("deadline"))
                             for ds in seen],
        "changes": [m["changes"] for m in phases],
        "seconds_to_converge": [m["seconds_to_converge"] for m in phases],
        "settled": [m["settled"] for m in phases],
        "overshoot": [m["overshoot"] for m in phases],
        "at_optimum": [m["at_optimum"] for m in phases],
        "oscillations": oscillations([m["changes"] for m in phases], optimum),
        "reversals": reversals([c for m in phases for c in m["changes"]]),
        "backlog_max_events": max((x["lag_events"] + x["pool_backlog"]
                                   for x in sampler.samples), default=0),
        "lag_max_events": max((x["lag_events"] for x in sampler.samples), default=0),
        "executors_max": max((x["executors"] or 0 for x in sampler.samples), default=0),
        "within_target": (sum(1 for v in a_lat if v <= ALERTS_TARGET_MS) / len(a_lat)
                          if a_lat else None),
        "alerts_results": len(a_lat), "alerts_p99_ms": quantile(a_lat, 0.99),
        "alerts_within_target_runtime": alerts_runtime,
        "p99_ms": quantile(list(bids.latency), 0.99),
        "p99_ms_per_s": per_second([t - start for t in bids.egress], bids.latency),
        "results_equal": equal, "result_rows": sum(bids.fingerprint.rows.values()),
        "expected_rows": sum(expected.rows.values()), "events": feed.pushed,
        "scaling_errors": status.get("errors", []), "misses": status.get("misses", []),
        "timeline": sampler.samples,
    }


# -- scenario 3: capped executors offered 3x one's capacity --------------------------------------
def capped(s: Setup, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The window offered 3x one instance's capacity C (C input events/s, three bids each)
    for `capped_s`, on a pool that starts with one executor and the window at one
    instance: DS2 adds executors and instances until the rate is taken in. Its figures:
    the decisions, `seconds_to_rate` (from the start to the first sample after which
    nothing waits at the generator: its lag stays under one push), the rate the window
    took at each parallelism, the second from which its p99 stays within its target,
    and whether the results equal run_local's."""
    trace = Trace(((s.capacity_eps, s.capped_s),))
    r = run_policy(s, "ds2", log, trace=trace, start_executors=1)
    samples = r["timeline"]
    fell = [i for i, x in enumerate(samples) if x["lag_events"] >= PUSH_EVENTS]
    after = samples[fell[-1] + 1] if fell and fell[-1] + 1 < len(samples) else (
        None if fell else samples[0] if samples else None)
    taken: dict[int, list[float]] = {}  # the window's events/s in all, by parallelism
    per_instance: dict[int, list[float]] = {}  # one instance's, per useful second
    for x in samples:
        if x.get("events_in_eps") is not None:
            taken.setdefault(x["parallelism"], []).append(x["events_in_eps"])
        if x["true_processing_eps"] is not None:
            per_instance.setdefault(x["parallelism"], []).append(x["true_processing_eps"])
    per_s = r["p99_ms_per_s"]  # [second, p99]
    over = [sec for sec, v in per_s if v > TARGET_MS]
    returned = (max(over) + 1 if over else per_s[0][0]) if per_s and (
        not over or max(over) < per_s[-1][0]) else None
    decisions = [d for phase in r["decisions"] for d in phase]
    return {"offered_eps": BIDS_PER_EVENT * s.capacity_eps, "capacity_eps": s.capacity_eps,
            "seconds": s.capped_s, "optimum": r["optimum"][0],
            "decisions": decisions, "actions": len(decisions),
            "oscillations": r["oscillations"], "settled": r["settled"][0],
            "executors_max": r["executors_max"],
            "seconds_to_rate": None if after is None else max(0.0, after["t_s"]),
            "window_eps_by_parallelism": {p: round(statistics.median(v))
                                          for p, v in sorted(taken.items())},
            "instance_eps_by_parallelism": {p: round(statistics.median(v))
                                            for p, v in sorted(per_instance.items())},
            "p99_within_target_from_s": returned,
            "p99_ms": r["p99_ms"], "results_match": r["results_equal"],
            "result_rows": r["result_rows"], "alerts_within_target": r["within_target"],
            "timeline": samples}


# -- scenario 2: a hot key, with and without a lessee -----------------------------------------
def run_hot(s: Setup, lessee: bool) -> dict[str, Any]:
    """Bids with a hot key, `hot_events` pushed flat out, the window at 2 instances; with
    one lessee if asked (and the runtime has `lease`)."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    rt = Runtime.start(RuntimeConfig(num_executors=s.hot_executors,
                                     service_capacity_eps=s.capacity_eps,
                                     checkpoint_interval_s=0, scaling={"policy": "off"},
                                     credit_events=s.hot_buffer_events,
                                     ingress_events=s.hot_buffer_events),
                       pool=f"bench-scaling-hot-{'lessee' if lessee else 'plain'}")
    out: dict[str, Any] = {"lessee": lessee}
    try:
        rt.deploy(bids_dataflow(parallelism=s.hot_parallelism))
        if lessee:
            lease = getattr(rt, "lease", None)
            if lease is None:
                return {**out, "lessees": NOT_AVAILABLE}
            info = lease(BIDS, STEP, 1)
            if isinstance(info, Mapping) and info.get("id") and info.get("state") == "running":
                rt.wait_migration(info["id"], 60)
        start = time.time()
        feed = Feed(rt.handle(), Keys(s.auctions, s.hot_share), start, None, s.seed + 1,
                    limit=s.hot_events)
        bids = BidResults()
        reader = Reader(rt.handle(), BIDS, (SINK,), bids.add)
        for th in (feed, reader):
            th.start()
        while feed.is_alive():
            check_threads(feed, reader)
            time.sleep(0.05)
        check_threads(feed)
        pushed = time.time()
        status = rt.scaling(BIDS).get("dataflows", {}).get(BIDS, {}).get("steps", {})
        hosts = rt.describe(BIDS, refresh=True)["hosts"]
        _close_and_read(rt, feed, reader, s.drain_timeout_s)
    finally:
        rt.shutdown(stop_ray=False)

    expected = reference(feed)
    took = max(bids.egress, default=pushed) - start
    return {**out,
            "lessees": int(status.get(STEP, {}).get("lessees") or 0) if lessee else 0,
            "hosts": sorted(a for a in hosts if a.startswith(f"{BIDS}/{STEP}/")),
            "throughput_eps": feed.pushed / took, "seconds": took,
            "push_seconds": pushed - start,
            "p99_ms": quantile(list(bids.latency), 0.99), "results": len(bids.latency),
            "results_equal": bids.fingerprint == expected,
            "result_rows": sum(bids.fingerprint.rows.values()),
            "expected_rows": sum(expected.rows.values()), "events": feed.pushed}


def hot_key(s: Setup, log: Callable[[str], None] = print) -> dict[str, Any]:
    plain = run_hot(s, False)
    log(f"  hot key, no lessee: {plain['throughput_eps']:,.0f} events/s, p99 "
        f"{format_ms(plain['p99_ms'])}, results equal: {plain['results_equal']}")
    leased = run_hot(s, True)
    if leased.get("lessees") == NOT_AVAILABLE:
        log(f"  hot key, one lessee: {NOT_AVAILABLE}")
        return {"without": plain, "with": leased, "lessees": NOT_AVAILABLE,
                "lessee_speedup": None}
    log(f"  hot key, one lessee: {leased['throughput_eps']:,.0f} events/s, p99 "
        f"{format_ms(leased['p99_ms'])}, results equal: {leased['results_equal']}")
    speedup = (leased["throughput_eps"] / plain["throughput_eps"]
               if plain["throughput_eps"] else None)
    return {"without": plain, "with": leased, "lessee_speedup": speedup}


# -- figures ------------------------------------------------------------------------------------
def summary(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {p: {"total_actions": sum(r["actions"]), "max_actions_per_step": max(r["actions"]),
                "deadline_actions": sum(r["deadline_actions"]),
                "oscillations": r["oscillations"], "phases_at_optimum": sum(r["at_optimum"]),
                "seconds_to_converge_total": round(sum(r["seconds_to_converge"]), 3),
                "overshoot_total": sum(r["overshoot"])}
            for p, r in policies.items()}


def goals(summ: Mapping[str, Mapping[str, Any]], hot: Mapping[str, Any] | None
          ) -> dict[str, bool | None]:
    d, t = summ.get("ds2"), summ.get("threshold")
    ahead = None
    if d is not None and t is not None:
        ahead = (d["phases_at_optimum"] >= t["phases_at_optimum"]
                 and d["total_actions"] <= t["total_actions"]
                 and d["overshoot_total"] <= t["overshoot_total"])
    speedup = hot.get("lessee_speedup") if hot else None
    return {"ds2_at_most_2_actions_per_step": None if d is None else d["max_actions_per_step"] <= 2,
            "ds2_no_oscillation": None if d is None else d["oscillations"] == 0,
            "ds2_ahead_of_threshold": ahead,
            "lessee_speedup_at_least_1_5": None if speedup is None else speedup >= 1.5}


def _figures(s: Setup, policies: dict[str, Any], hot: dict[str, Any] | None,
             capped_run: dict[str, Any] | None = None) -> dict[str, Any]:
    summ = summary(policies)
    trace = s.trace()
    return {"setup": {**asdict(s), "base_eps": s.base_eps,
                      "rates_eps": [r for r, _ in trace.phases],
                      "optimum": [s.optimum(r) for r, _ in trace.phases],
                      "capacity": "service_capacity_eps: a simulated speed per keyed instance "
                                  "(the same for every policy)",
                      "latency": "bids: egress - window_end; alerts: egress - ingest",
                      "pool_backlog": "executor_stats() backlog: messages queued"},
            "policies": policies, "summary": summ, "hot_key": hot, "capped": capped_run,
            "goals": {**goals(summ, hot), **capped_goals(capped_run)}}


def capped_goals(c: Mapping[str, Any] | None) -> dict[str, bool | None]:
    """The capped part's goals: the offered rate taken in within 60 s, in at most 3
    actions, no oscillation, results exact."""
    if c is None:
        return {}
    return {"capped_rate_taken_within_60_s": c["seconds_to_rate"] is not None
            and c["seconds_to_rate"] <= 60,
            "capped_at_most_3_actions": c["actions"] <= 3,
            "capped_no_oscillation": c["oscillations"] == 0,
            "capped_results_match": c["results_match"]}


def _print_policy(r: Mapping[str, Any], log: Callable[[str], None]) -> None:
    log(f"  optimum {r['optimum']}, settled {r['settled']}, actions {r['actions']}, "
        f"converged in {r['seconds_to_converge']} s, overshoot {r['overshoot']}, "
        f"oscillations {r['oscillations']}")
    log(f"  backlog max {r['backlog_max_events']:,} (lag max {r['lag_max_events']:,} events); "
        f"bids p99 {format_ms(r['p99_ms'])}; alerts within target "
        f"{'-' if r['within_target'] is None else format(r['within_target'], '.1%')}; "
        f"results equal: {r['results_equal']} ({r['result_rows']:,} rows)")
    for e in r["scaling_errors"]:
        log(f"  scaling error: {e}")


def mismatches(figures: Mapping[str, Any]) -> list[str]:
    """The runs whose results differ from run_local's."""
    bad = [f"policy {p}" for p, r in figures["policies"].items() if not r["results_equal"]]
    hot = figures.get("hot_key") or {}
    bad += [f"hot key {k}" for k in ("without", "with")
            if k in hot and hot[k].get("results_equal") is False]
    if (figures.get("capped") or {}).get("results_match") is False:
        bad.append("capped")
    return bad


def run(s: Setup, policies: Sequence[str], parts: Sequence[str], json_path: str | None
        ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """The parts asked for, in turn (the figures so far saved after each policy)."""
    began = time.monotonic()
    results: dict[str, Any] = {}
    hot: dict[str, Any] | None = None
    capped_run: dict[str, Any] | None = None
    trace = s.trace()
    print(f"C = {s.capacity_eps:,.0f} events/s per keyed instance; rates "
          f"{[r for r, _ in trace.phases]} events/s, {s.phase_s:g} s each; optimum "
          f"{[s.optimum(r) for r, _ in trace.phases]}")
    for policy in policies if "steps" in parts else []:
        print(f"{policy}:")
        results[policy] = run_policy(s, policy)
        _print_policy(results[policy], print)
        save_json(json_path, _figures(s, results, hot))
    if "hot" in parts:
        print("hot key:")
        hot = hot_key(s)
    if "capped" in parts:
        print(f"capped: the window offered {BIDS_PER_EVENT * s.capacity_eps:,.0f} events/s, "
              f"3x one instance's capacity, for {s.capped_s:g} s, from one executor:")
        c = capped_run = capped(s)
        print(f"  actions {c['actions']} (settled at {c['settled']}, optimum {c['optimum']}), "
              f"the rate taken in after {c['seconds_to_rate']} s, p99 within target from "
              f"{c['p99_within_target_from_s']} s, window events/s by parallelism "
              f"{c['window_eps_by_parallelism']}, results equal: {c['results_match']}")
    print(f"all parts took {time.monotonic() - began:.0f} s")
    return results, hot, capped_run


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="20 s phases, 15 s hot runs")
    size.add_argument("--smoke", action="store_true",
                      help="1.5 s phases, 2 s hot runs: the plumbing only (under a minute)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated, of {', '.join(POLICIES)}")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="steps (scenario 1), hot (scenario 2), capped (scenario 3), "
                        "comma-separated")
    parser.add_argument("--capacity", type=float,
                        help="C, events/s per keyed instance (default 1000)")
    parser.add_argument("--no-deadline-aware", action="store_true",
                        help="scenario 1 without the scaler's deadline rule: the policies alone")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plots", help="write scaling.png to this folder (needs matplotlib)")
    args = parser.parse_args(argv)
    s = Setup.smoke() if args.smoke else Setup.quick() if args.quick else Setup.full()
    if args.capacity is not None:
        s = replace(s, capacity_eps=args.capacity)
    if args.no_deadline_aware:
        s = replace(s, deadline_aware=False)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    for given, known, what in ((policies, POLICIES, "policies"), (parts, PARTS, "parts")):
        if set(given) - set(known):
            parser.error(f"unknown {what} {sorted(set(given) - set(known))}; expected some of "
                         f"{known}")

    own_ray = ensure_ray()
    try:
        results, hot, capped_run = run(s, policies, parts, args.json)
    finally:
        if own_ray:
            import ray

            ray.shutdown()
    figures = _figures(s, results, hot, capped_run)
    save_json(args.json, figures)
    for p, row in figures["summary"].items():
        print(f"{p}: {row}")
    for goal, ok in figures["goals"].items():
        print(f"goal {goal}: {'-' if ok is None else 'met' if ok else 'NOT met'}")
    if hot:
        print(f"lessee speedup: {hot.get('lessee_speedup')}")
    if args.plots and results:
        from bench.harness.plots import scaling_timeline

        try:
            print("wrote", scaling_timeline(figures, args.plots))
        except ImportError as e:  # the figures are in the JSON all the same
            print(f"no plot ({e}): pip install -e '.[bench]'", file=sys.stderr)
    for bad in mismatches(figures):
        print(f"RESULTS DIFFER FROM run_local: {bad}", file=sys.stderr)
    return figures


if __name__ == "__main__":
    sys.exit(1 if mismatches(main()) else 0)
