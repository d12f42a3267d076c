"""Live migration of operator state: latency while key bins move, per strategy (Megaphone).

Run: `python -m bench.migration [--quick | --smoke] [--json FILE] [--plots DIR]
      [--strategies all_at_once,batched,fluid,stop_the_world] [--capacity EPS]
      [--backends memory,rocksdb]`

The migrated dataflow, "counts": source (ts, key) -> key_by(key) -> tumbling count per
key (`window(id="counts")`, `n=count()`) -> sink, target 1 s. Its state is large: the
source's watermark trails event time by `lateness_ms`, so `(lateness_ms + window_ms) /
window_ms` windows are open at once, and each window gets its own range of `keys_per_window`
keys (the key range drifts with event time, as sessions or devices come and go). Full
mode: 2 s windows, 64 s behind, 60,000 keys per window: about 2,000,000 distinct keys in
state (1,000,000 on each side of the move), while results leave at 30,000 rows/s (a
count's result rows cost the executor more than its input events: with every key in one
window only, state = result rate x how long a window stays open), 4096 bins. `--quick`:
1 s windows 3 s behind, 50,000 keys, 64 bins, phases of a few seconds (about 75 s in all);
`--smoke` (the integration test's) the same with 20,000 keys and shorter phases.

Next to it, "alerts" (`cameo_actors.examples.alerts_dataflow`: filter + map, target 50 ms,
tenant ops) gets a steady light stream (1,000 events/s, a quarter of them alerts) from its
own thread, all the time.

Input: a generator thread on a fixed schedule: event i (counted from the last change of
rate) is *produced* at `start + i * 1000 / rate` ms and that is its event time `ts` (ms
since the epoch), whether or not the runtime takes it then: events wait at the generator
when it cannot push (backpressure, or the stop-the-world pause) and their wait counts.

Capacity: measured once, in the first strategy's run, after its state filled (at four
events per key and window): the generator pushes flat out (ts = now) for `calibrate_s`
while results are read, and the events/s taken is the pool's capacity for this dataflow;
then it drops to `load` (0.6) of that, the rate every strategy is offered from its start
on (`--capacity` skips the measurement). This 2-core machine is shared: the capacity moves
with the other load, so the JSON keeps the generator's lag (`generator_lag_*_ms`: how long
the next event had waited when a push returned) to tell whether the offered rate was met.

Per strategy, on a fresh pool of two executors (`bins` key bins, so every peak RSS is the
strategy's own): deploy counts (all its steps on executor 0) and alerts (on executor 1,
the one the bins move to); let the state fill (`lateness_ms + window_ms`, then
`warmup_s`); a steady phase (`steady_s`); then move half the bins from executor 0 to
executor 1 with `scale("counts", "counts", 2, strategy=...)`: `all_at_once` (one epoch),
`batched` (an eighth of the bins per epoch, the runtime's default) or `fluid` (one bin per
epoch); or `stop_the_world`, Flink-style rescaling: stop the input, drain what was pushed,
move all the state at once (`all_at_once` while nothing flows), resume (the generator then
pushes what it produced meanwhile; `duration_s` is the whole pause). Then `after_s` more,
stop the input, close, read every result and compare them with `run_local`'s engine
(`cameo_actors.testing.LocalEngine`) on the same events (their ts kept, keys from the
same seed): equal row count, rows and counted events per window, and an
order-independent hash of the multiset of (key, window_start, n) rows.

State backends (`--backends`, default memory): every strategy runs on pools keeping
the count's state in each backend (`RuntimeConfig.state_backend`) in turn, at the same
offered rate; a run on another backend than memory is keyed `strategy@backend` in the
JSON, and its goals carry the backend's name.

Latency of a count result: `egress_ms - (window_end + lateness_ms)`, from the moment the
generator produced the first event that made the window computable (the watermark passes
`window_end` once an event with `ts >= window_end + lateness_ms` arrives), so time spent
waiting at the generator counts. The runtime's own figure (egress - ingest of the message
that made it computable) is kept too (`*_runtime_ms`). Alerts: egress - ingest
(`alerts_p99_ms`, the runtime's) and egress - ts (`alerts_p99_from_gen_ms`).

Phases, by result: steady = computable in the steady phase; migration = computable or
egressed from the start of the move (the pause, for stop_the_world) to `settle_s` after
its end. Figures per strategy: `steady_p99_ms`, `migration_p99_ms`, `migration_max_ms`,
their ratio, `alerts_p99_ms` during the migration and `alerts_within_target` (that p99
within the 50 ms target), `duration_s`, `bytes_moved`, `peak_rss_mb` (the executors'
processes' VmHWM, summed, read before the close: the close's flush of every open window
is no part of a move), `results_match`. Goals, reported and not asserted: batched
keeps migration p99 within 2x steady and alerts on target; all_at_once and
stop_the_world show the spike. A migration not done within `migration_timeout_s` (180 s;
fluid moves one bin of 4096 per epoch) is reported `completed: false`, its rate and
projected duration in `note`; that run is cancelled, its results unchecked.

Plots (`--plots DIR`): result latency (max and median per 100 ms of egress) over time from
the start of the move, one panel per strategy, the move shaded, alerts in another colour:
`DIR/migration_latency.png` (needs matplotlib, `pip install -e '.[bench]'`); the points
are always written to `DIR/migration_latency.csv`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any

from bench.harness.cluster import ensure_ray, process_memory_mb, wait_finished
from bench.harness.feeds import ALERTS, AlertFeed
from bench.harness.fingerprint import Fingerprint
from bench.harness.output import format_ms, save_json
from bench.harness.plots import pyplot
from bench.harness.stats import quantile
from bench.harness.threads import check_threads
from cameo_actors import Dataflow, count
from cameo_actors.examples import alerts_dataflow
from cameo_actors.operators.state_store import BACKENDS, MEMORY

STRATEGIES = ("all_at_once", "batched", "fluid", "stop_the_world")
COUNTS, STEP, SOURCE, SINK = "counts", "counts", "events", "out"
SCHEMA = {"ts": "int", "key": "str"}
#: Events per push call of the generator (the runtime sends them as one ingest call).
PUSH_EVENTS = 2_000


@dataclass(frozen=True)
class Setup:
    """One run's shape (`full()`, `quick()` or `smoke()`)."""

    bins: int
    window_ms: int
    lateness_ms: int
    keys_per_window: int
    warmup_s: float  # at the offered rate, before the steady phase
    steady_s: float
    after_s: float  # after the move is done
    settle_s: float  # the migration phase lasts this long after the move's end
    calibrate_s: float
    migration_timeout_s: float
    load: float = 0.6
    alerts_eps: float = 1_000.0
    seed: int = 11

    @classmethod
    def full(cls) -> Setup:
        return cls(bins=4096, window_ms=2_000, lateness_ms=64_000, keys_per_window=60_000,
                   warmup_s=3.0, steady_s=10.0, after_s=8.0, settle_s=1.0, calibrate_s=6.0,
                   migration_timeout_s=180.0)

    @classmethod
    def quick(cls) -> Setup:
        return cls(bins=64, window_ms=1_000, lateness_ms=3_000, keys_per_window=12_500,
                   warmup_s=1.5, steady_s=3.0, after_s=2.0, settle_s=1.0, calibrate_s=2.0,
                   migration_timeout_s=60.0)

    @classmethod
    def smoke(cls) -> Setup:
        """The plumbing only (figures not judged): `quick()`, smaller and shorter but for
        the phases during and after the move, which must see a window fire (every 1 s)."""
        return cls(bins=64, window_ms=1_000, lateness_ms=3_000, keys_per_window=5_000,
                   warmup_s=0.5, steady_s=1.5, after_s=2.0, settle_s=1.0, calibrate_s=1.0,
                   migration_timeout_s=60.0)

    @property
    def fill_eps(self) -> float:
        """The rate the state fills at, before the saturation run: four events per key."""
        return 4.0 * self.keys_per_window * 1000 / self.window_ms

    @property
    def open_windows(self) -> int:
        return -(-(self.lateness_ms + self.window_ms) // self.window_ms)


def counts_dataflow(s: Setup, lateness_ms: int | None = None) -> Dataflow:
    """The migrated dataflow: a tumbling count per key, its window step named "counts"."""
    late = s.lateness_ms if lateness_ms is None else lateness_ms
    return (Dataflow(COUNTS, latency_target_ms=1000, tenant="analytics",
                     state_bytes=3_500_000_000)
            .source(SOURCE, schema=SCHEMA, event_time="ts", allowed_lateness_ms=late)
            .key_by("key")
            .window(tumbling_ms=s.window_ms, id=STEP).aggregate(n=count())
            .sink(SINK))


def make_events(rng: random.Random, s: Setup, times: list[int]) -> list[dict[str, Any]]:
    """One event per event time in `times`; its key from the range of its window."""
    w_ms, d = s.window_ms, s.keys_per_window
    rand = rng.random
    return [{"ts": t, "key": f"k{(t // w_ms) % 4096 * d + int(rand() * d)}"} for t in times]


class CountFeed(threading.Thread):
    """Pushes the counts' events. On a schedule at `rate` events/s (`set_rate`): event i
    from the switch on is produced at `switch_ms + i * 1000 // rate` and that is its `ts`,
    pushed once produced, in pushes of about 10 ms of events (PUSH_EVENTS when behind).
    With rate None, flat out: ts = now. `paused` holds the input: events keep being
    produced and wait here. Every event's ts is kept (`times`), so that the reference
    can make the same events again."""

    def __init__(self, rt: Any, s: Setup, rate: float | None) -> None:
        super().__init__(daemon=True, name="count-feed")
        self.rt, self.s = rt, s
        self.rng = random.Random(s.seed)
        self.times = array("q")
        self.lag = array("d")  # (wall ms, ms the next event waited here) after each push
        self.pushed = 0
        self._want: tuple[float | None] | None = (rate,)
        self.rate: float | None = None
        self.switch_ms, self.switch_at = 0.0, 0
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.idle = threading.Event()  # set while paused and every push was accepted
        self.error: BaseException | None = None

    def set_rate(self, rate: float | None) -> None:
        self._want = (rate,)

    def _next(self, now: float) -> list[int] | None:
        if self._want is not None:
            (self.rate,), self._want = self._want, None
            self.switch_ms, self.switch_at = now, self.pushed
        if self.rate is None:
            return [int(now)] * PUSH_EVENTS
        k0 = self.pushed - self.switch_at
        due = int((now - self.switch_ms) * self.rate / 1000) + 1 - k0
        first = int(self.switch_ms + k0 * 1000 // self.rate)
        if due <= 0 or (due < PUSH_EVENTS and first > now - 10):
            return None
        return [int(self.switch_ms + k * 1000 // self.rate) for k in range(k0, k0 + min(PUSH_EVENTS, due))]

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.paused.is_set():
                    if not self.idle.is_set():
                        self.rt.flush()
                        self.idle.set()
                    time.sleep(0.002)
                    continue
                self.idle.clear()
                now = time.time() * 1000
                times = self._next(now)
                if times is None:
                    time.sleep(0.002)
                    continue
                self.rt.push(COUNTS, SOURCE, make_events(self.rng, self.s, times),
                             batch_size=PUSH_EVENTS)
                self.times.extend(times)
                self.pushed += len(times)
                after = time.time() * 1000
                self.lag.extend((after, after - times[-1]))
            self.rt.flush()
        except BaseException as e:  # reported by the main thread
            self.error = e


class Samples:
    """(egress ms, latency ms, runtime latency ms, computable-at ms) per result."""

    def __init__(self) -> None:
        self.egress, self.latency = array("d"), array("d")
        self.runtime, self.at = array("d"), array("d")

    def add(self, egress: float, latency: float, runtime: float, at: float) -> None:
        self.egress.append(egress)
        self.latency.append(latency)
        self.runtime.append(runtime)
        self.at.append(at)

    def __len__(self) -> int:
        return len(self.egress)

    def select(self, lo: float, hi: float, *, by_egress: bool = True) -> list[int]:
        """Indices of results computable in [lo, hi), or (by_egress) egressed in it."""
        eg, at = self.egress, self.at
        return [i for i in range(len(eg))
                if lo <= at[i] < hi or (by_egress and lo <= eg[i] < hi)]


class Reader(threading.Thread):
    """Reads and commits both dataflows' results continuously: latencies and the counts'
    fingerprint."""

    def __init__(self, rt: Any, s: Setup, counts: bool = True) -> None:
        super().__init__(daemon=True, name="reader")
        self.rt, self.s, self.with_counts = rt, s, counts
        self.counts, self.alerts = Samples(), Samples()
        self.fingerprint = counts_fingerprint()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def read_once(self) -> int:
        got = 0
        if self.with_counts:
            late = self.s.lateness_ms
            rows = self.rt.result_rows(COUNTS, commit=True)
            for ev, ing, eg in rows:
                at = ev["window_end"] + late
                self.counts.add(eg, eg - at, eg - ing, at)
                self.fingerprint.add(SINK, ev)
            got += len(rows)
        rows = self.rt.result_rows(ALERTS, commit=True)
        for ev, ing, eg in rows:
            self.alerts.add(eg, eg - ing, eg - ing, ev["ts"])
        return got + len(rows)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.read_once():
                    time.sleep(0.01)
        except BaseException as e:
            self.error = e


def counts_fingerprint() -> Fingerprint:
    """The counts' results as a multiset of (key, window_start, n) rows, with rows and
    events counted per window to say which windows differ."""
    return Fingerprint(fields=("key", "window_start", "n"), per_window="n")


def _peak_rss_mb(rt: Any) -> list[float]:
    """VmHWM (peak resident set) of each executor's process, MB (nan: not readable)."""
    out = []
    for e in sorted(rt.executor_stats(), key=lambda e: e["executor"]):
        mb = process_memory_mb(e["pid"], "VmHWM")
        out.append(float("nan") if mb is None else mb)
    return out


def reference(s: Setup, times: array[int]) -> Fingerprint:
    """The counts' results on the same events (their `times`, keys from the same seed) by
    `run_local`'s engine (`cameo_actors.testing.LocalEngine`), in-process."""
    from cameo_actors.testing import LocalEngine

    engine = LocalEngine(counts_dataflow(s).spec)
    rng = random.Random(s.seed)
    fp = counts_fingerprint()
    out = engine.result.sinks[SINK]
    for first in range(0, len(times), 20_000):
        engine.push(SOURCE, make_events(rng, s, times[first:first + 20_000].tolist()))
        for ev in out:
            fp.add(SINK, ev)
        out.clear()
    engine.finish()
    for ev in out:
        fp.add(SINK, ev)
    return fp


def _stats(samples: Samples, idx: list[int]) -> dict[str, Any]:
    lat = [samples.latency[i] for i in idx]
    rtl = [samples.runtime[i] for i in idx]
    return {"n": len(idx), "p50": quantile(lat, 0.5), "p99": quantile(lat, 0.99),
            "max": max(lat) if lat else None, "p99_runtime": quantile(rtl, 0.99),
            "max_runtime": max(rtl) if rtl else None}


def _busy(rt: Any) -> tuple[float, list[float]]:
    """(wall s, each executor's busy ms so far)."""
    return time.time(), [e["busy_ms"] for e in sorted(rt.executor_stats(),
                                                      key=lambda e: e["executor"])]


def _busy_share(a: tuple[float, list[float]], b: tuple[float, list[float]]) -> list[float]:
    """Each executor's share of the time from a to b spent running operators."""
    return [round((y - x) / 1000 / max(b[0] - a[0], 1e-9), 3) for x, y in zip(a[1], b[1], strict=True)]


def _max_lag(feed: CountFeed, lo: float, hi: float) -> float | None:
    lags = [feed.lag[i + 1] for i in range(0, len(feed.lag), 2) if lo <= feed.lag[i] < hi]
    return max(lags) if lags else None


def run_strategy(s: Setup, strategy: str, capacity: float | None, log: Any = print,
                 backend: str = MEMORY) -> tuple[dict[str, Any], dict[str, Any]]:
    """One strategy on a fresh pool keeping its state in `backend`: its figures and its
    plot series. Without `capacity`, it is measured here first, flat out, once the state
    is full (the saturation run)."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    # Moving state alone: checkpoints off (bench.recovery measures what they cost).
    rt = Runtime.start(RuntimeConfig(num_executors=2, bins=s.bins, checkpoint_interval_s=0,
                                     state_backend=backend),
                       pool=f"bench-migration-{strategy}-{backend}")
    out: dict[str, Any] = {"strategy": strategy, "backend": backend}
    try:
        rt.deploy(counts_dataflow(s))
        rt.deploy(alerts_dataflow())
        hosts = rt.describe(COUNTS, refresh=True)["hosts"]
        alerts_on = sorted(set(rt.describe(ALERTS, refresh=True)["hosts"].values()))
        # Every strategy fills its state at the same rate, so that each moves the same keys.
        feed, reader, alerts = CountFeed(rt.handle(), s, s.fill_eps), Reader(rt.handle(), s), \
            AlertFeed(rt.handle(), s.alerts_eps, s.seed)
        for t in (feed, reader, alerts):
            t.start()
        time.sleep((s.lateness_ms + s.window_ms) / 1000 + 1.0)  # the state fills
        check_threads(feed, reader, alerts)
        if capacity is None:  # flat out for a while: what the pool sustains
            feed.set_rate(None)
            time.sleep(0.5)
            n0, t0 = rt.stats(COUNTS)["events_in"], time.monotonic()
            time.sleep(s.calibrate_s)
            n1, t1 = rt.stats(COUNTS)["events_in"], time.monotonic()
            capacity = (n1 - n0) / (t1 - t0)
            log(f"  capacity: {capacity:,.0f} events/s flat out")
            time.sleep(2.0)  # the queues the saturation run filled drain
        rate = round(s.load * capacity, -2)
        feed.set_rate(rate)
        time.sleep(s.warmup_s)
        check_threads(feed, reader, alerts)
        steady0 = time.time() * 1000
        busy = [_busy(rt)]
        time.sleep(s.steady_s)
        check_threads(feed, reader, alerts)

        m0 = time.time() * 1000
        busy.append(_busy(rt))
        extra: dict[str, Any] = {}
        if strategy == "stop_the_world":
            feed.paused.set()
            if not feed.idle.wait(120):
                raise TimeoutError("the generator did not stop")
            while True:  # drain: every pushed event through the counts
                st = rt.stats(COUNTS)
                if st["events_in"] >= feed.pushed and st["backlog"] == 0:
                    break
                time.sleep(0.01)
            drained = time.time() * 1000
            info = rt.scale(COUNTS, STEP, 2, strategy="all_at_once")
            info = rt.wait_migration(info["id"], s.migration_timeout_s)
            feed.paused.clear()
            m1 = time.time() * 1000
            extra = {"pause_s": (m1 - m0) / 1000, "drain_s": (drained - m0) / 1000,
                     "state_move_s": info["duration_s"]}
        else:
            info = rt.scale(COUNTS, STEP, 2, strategy=strategy)
            info = rt.wait_migration(info["id"], s.migration_timeout_s)
            m1 = (info["ended_at"] or time.time()) * 1000
        busy.append(_busy(rt))
        completed = info["state"] == "done"
        if info["state"] == "failed":
            raise RuntimeError(f"{strategy}: the migration failed: {info['error']}")
        time.sleep(s.after_s)
        check_threads(feed, reader, alerts)
        feed.stop.set()
        feed.join(120)
        stop_ms = time.time() * 1000
        check_threads(feed)
        hosts_after = rt.describe(COUNTS, refresh=True)["hosts"]
        rss = _peak_rss_mb(rt)  # before the close, whose flush of every open window is no move

        note = None
        if completed:
            feed.rt.close(COUNTS)
            wait_finished(rt, COUNTS, 600)
            reader.stop.set()
            reader.join(120)
            check_threads(reader)
            while reader.read_once():  # the last results
                pass
        else:
            done = max(1, info["bins_moved"])
            note = (f"not done after {s.migration_timeout_s:g} s: {info['bins_moved']} of "
                    f"{info['bins_total']} bins in {info['epochs_done']} epochs "
                    f"({info['bins_moved'] / max(info['duration_s'], 1e-9):.2f} bins/s; all "
                    f"{info['bins_total']} would take about "
                    f"{info['duration_s'] * info['bins_total'] / done:,.0f} s); cancelled, "
                    "results unchecked")
            reader.stop.set()
            reader.join(120)
            check_threads(reader)
            rt.cancel(COUNTS)
        alerts.stop.set()
        alerts.join(60)
        check_threads(alerts)
    finally:
        rt.shutdown(stop_ray=False)

    if completed:
        began = time.monotonic()
        expected = reference(s, feed.times)
        match: bool | None = reader.fingerprint == expected
        differing = reader.fingerprint.differing_windows(expected)
        log(f"  reference: {expected.total:,} rows from {len(feed.times):,} events in "
            f"{time.monotonic() - began:.1f} s")
    else:
        expected, match, differing = counts_fingerprint(), None, []

    hi = m1 + s.settle_s * 1000
    c, a = reader.counts, reader.alerts
    steady = _stats(c, c.select(steady0, m0, by_egress=False))
    during = _stats(c, c.select(m0, hi))
    # The new layout's own steady state (two instances, half the events crossing to the
    # other executor): a rate the old layout took may be too much for it.
    after = _stats(c, c.select(hi, stop_ms, by_egress=False))
    a_steady = _stats(a, a.select(steady0, m0, by_egress=False))
    a_idx = a.select(m0, hi)
    a_during = _stats(a, a_idx)
    a_gen = [a.egress[i] - a.at[i] for i in a_idx]
    target = 50.0
    out.update({
        "completed": completed, "state": info["state"], "note": note,
        "capacity_eps": capacity, "rate_eps": rate,
        "duration_s": extra.get("pause_s", info["duration_s"]),
        "bytes_moved": info["bytes_moved"], "bins_moved": info["bins_moved"],
        "bins_total": info["bins_total"], "epochs_done": info["epochs_done"],
        "epochs_total": info["epochs_total"], **extra,
        "steady_p50_ms": steady["p50"], "steady_p99_ms": steady["p99"],
        "migration_p50_ms": during["p50"], "migration_p99_ms": during["p99"],
        "migration_max_ms": during["max"], "after_p99_ms": after["p99"],
        "migration_over_steady_p99": (during["p99"] / steady["p99"]
                                      if during["p99"] is not None and steady["p99"] else None),
        "steady_p99_runtime_ms": steady["p99_runtime"],
        "migration_p99_runtime_ms": during["p99_runtime"],
        "migration_max_runtime_ms": during["max_runtime"],
        "results_steady": steady["n"], "results_migration": during["n"],
        "generator_lag_steady_max_ms": _max_lag(feed, steady0, m0),
        "generator_lag_migration_max_ms": _max_lag(feed, m0, hi),
        "alerts_steady_p99_ms": a_steady["p99"],
        "alerts_p99_ms": a_during["p99"], "alerts_max_ms": a_during["max"],
        "alerts_p99_from_gen_ms": quantile(a_gen, 0.99),
        "alerts_within_target": a_during["p99"] is not None and a_during["p99"] <= target,
        "alerts_share_within_target": (sum(1 for i in a_idx if a.latency[i] <= target)
                                       / len(a_idx) if a_idx else None),
        "alerts_target_ms": target, "alerts_migration": a_during["n"],
        "peak_rss_mb": sum(rss), "peak_rss_mb_per_executor": rss,
        "executor_busy_steady": _busy_share(busy[0], busy[1]),
        "executor_busy_migration": _busy_share(busy[1], busy[2]),
        "results_match": match, "result_rows": reader.fingerprint.total,
        "expected_rows": expected.total if completed else None,
        "windows_differing": differing[:10], "events": feed.pushed,
        "keys_in_state_est": _keys_in_state(s, rate),
        "hosts_before": hosts, "hosts_after": hosts_after, "alerts_executors": alerts_on,
    })
    series = {"migration_s": ((m1 - m0) / 1000),
              "counts": _buckets(c, m0, steady0, stop_ms), "alerts": _buckets(a, m0, steady0, stop_ms)}
    return out, series


#: Plot points: latency per this much egress time.
BUCKET_MS = 100.0


def _buckets(samples: Samples, m0: float, lo: float, hi: float) -> list[list[float]]:
    """[seconds from m0, results, p50, p99, max] per BUCKET_MS of egress in [lo, hi), of the
    results computable by `hi` (not those the close fires)."""
    by: dict[int, list[float]] = {}
    for i in range(len(samples)):
        eg = samples.egress[i]
        if lo <= eg < hi and samples.at[i] <= hi:
            by.setdefault(int((eg - m0) // BUCKET_MS), []).append(samples.latency[i])
    return [[b * BUCKET_MS / 1000, len(v), quantile(v, 0.5) or 0.0, quantile(v, 0.99) or 0.0, max(v)]
            for b, v in sorted(by.items())]


def _keys_in_state(s: Setup, rate: float) -> int:
    """Distinct keys in the counts' state once it is full (expected, uniform keys)."""
    import math

    per_window = s.keys_per_window * (1 - math.exp(-rate * s.window_ms / 1000 / s.keys_per_window))
    return int(per_window * s.open_windows)


def run_name(strategy: str, backend: str) -> str:
    """A run's key in the JSON: the strategy, with its backend unless in memory."""
    return strategy if backend == MEMORY else f"{strategy}@{backend}"


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The goals, reported (not asserted): per backend measured, the memory's unsuffixed."""
    out: dict[str, Any] = {}
    for backend in dict.fromkeys(r.get("backend", MEMORY) for r in results.values()):
        def get(strategy: str, field: str, backend: str = backend) -> Any:
            return results.get(run_name(strategy, backend), {}).get(field)

        suffix = "" if backend == MEMORY else f"_{backend}"
        ratio = get("batched", "migration_over_steady_p99")
        out.update({
            f"batched_p99_within_2x_steady{suffix}": ratio is not None and ratio <= 2.0,
            f"batched_alerts_within_target{suffix}": get("batched", "alerts_within_target"),
            f"spike_all_at_once_x{suffix}": get("all_at_once", "migration_over_steady_p99"),
            f"spike_stop_the_world_x{suffix}": get("stop_the_world", "migration_over_steady_p99"),
        })
    return out


def write_plots(series: dict[str, dict[str, Any]], out_dir: str) -> list[str]:
    """The plot's points as CSV (latency per 100 ms of egress), and the PNG when matplotlib
    is there."""
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "migration_latency.csv")
    with open(csv_path, "w") as f:
        f.write("strategy,dataflow,t_s,results,p50_ms,p99_ms,max_ms,migration_end_s\n")
        for strategy, ser in series.items():
            for flow in ("counts", "alerts"):
                for t, n, p50, p99, top in ser[flow]:
                    f.write(f"{strategy},{flow},{t:.1f},{n},{p50:.1f},{p99:.1f},{top:.1f},"
                            f"{ser['migration_s']:.3f}\n")
    try:
        plt = pyplot()
    except ImportError:
        return [csv_path]

    names = list(series)
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.6 * len(names)), sharex=True,
                             squeeze=False)
    for ax, strategy in zip(axes[:, 0], names, strict=True):
        ser = series[strategy]
        for flow, color in (("counts", "C0"), ("alerts", "C3")):
            pts = ser[flow]
            xs = [p[0] for p in pts]
            ax.plot(xs, [max(p[4], 0.1) for p in pts], color=color, linewidth=1,
                    label=f"{flow} max per 100 ms")
            ax.plot(xs, [max(p[2], 0.1) for p in pts], color=color, linewidth=0.8,
                    linestyle="--", alpha=0.7, label=f"{flow} median")
        ax.axvspan(0, max(ser["migration_s"], 0.05), color="grey", alpha=0.25, label="migration")
        ax.axhline(50, color="C3", linestyle=":", linewidth=1)
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms, log)")
        ax.set_title(strategy, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds from the start of the migration (results' egress)")
    fig.tight_layout()
    png = os.path.join(out_dir, "migration_latency.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [png, csv_path]


def _figures(s: Setup, capacity: float | None, measured: bool, results: dict[str, Any]
             ) -> dict[str, Any]:
    return {
        "setup": {**dataclasses.asdict(s), "open_windows": s.open_windows,
                  "fill_eps": s.fill_eps, "capacity_eps": capacity,
                  "capacity_measured": measured,
                  "rate_eps": round(s.load * capacity, -2) if capacity else None,
                  "latency": "egress_ms - (window_end + lateness_ms): from when the generator "
                             "produced the first event that made the window computable; "
                             "*_runtime_ms: egress - ingest; alerts_p99_ms: egress - ingest",
                  "migration_phase": "results computable or egressed from the start of the "
                                     "move (the pause) to settle_s after its end"},
        "strategies": results,
        "goals": summary(results),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="50,000 keys, 64 bins, short phases: about 75 s")
    size.add_argument("--smoke", action="store_true",
                      help="20,000 keys, 64 bins, phases of a second or two (tests)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated, of {', '.join(STRATEGIES)}")
    parser.add_argument("--capacity", type=float,
                        help="the counts' capacity (events/s): skip the saturation run")
    parser.add_argument("--load", type=float, help="share of the capacity offered (0.6)")
    parser.add_argument("--backends", default=MEMORY,
                        help=f"comma-separated state backends, of {', '.join(BACKENDS)}: every "
                             f"strategy on each, at the same offered rate")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plots", help="write the latency plot (and its CSV) to this folder")
    args = parser.parse_args(argv)
    backends = [x.strip() for x in args.backends.split(",") if x.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"unknown backends {sorted(set(backends) - set(BACKENDS))}; expected some "
                     f"of {BACKENDS}")
    s = Setup.smoke() if args.smoke else Setup.quick() if args.quick else Setup.full()
    if args.load is not None:
        s = dataclasses.replace(s, load=args.load)
    strategies = [x.strip() for x in args.strategies.split(",") if x.strip()]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        parser.error(f"unknown strategies {sorted(unknown)}; expected some of {STRATEGIES}")

    started = ensure_ray()
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    series: dict[str, dict[str, Any]] = {}
    capacity: float | None = args.capacity
    try:
        print(f"{s.open_windows} windows of {s.keys_per_window:,} keys open: about "
              f"{s.open_windows * s.keys_per_window:,} keys in state, {s.bins} bins")
        for backend, strategy in ((b, x) for b in backends for x in strategies):
            name = run_name(strategy, backend)
            print(f"{name}:")
            results[name], series[name] = run_strategy(s, strategy, capacity, backend=backend)
            r = results[name]
            capacity = r["capacity_eps"]  # the same load for every strategy
            save_json(args.json, _figures(s, capacity, args.capacity is None, results))
            print(f"  {'done' if r['completed'] else 'NOT done'} in {r['duration_s']:.2f} s, "
                  f"{r['bytes_moved'] / 1e6:,.1f} MB, {r['bins_moved']} bins, "
                  f"{r['epochs_done']} epochs; p99 steady {format_ms(r['steady_p99_ms'])}, during "
                  f"{format_ms(r['migration_p99_ms'])} (max {format_ms(r['migration_max_ms'])}), after "
                  f"{format_ms(r['after_p99_ms'])}; alerts "
                  f"p99 {format_ms(r['alerts_p99_ms'])}; peak RSS {r['peak_rss_mb']:,.0f} MB; "
                  f"results match: {r['results_match']}")
        print(f"done in {time.monotonic() - t0:.0f} s")
    finally:
        if started:
            import ray

            ray.shutdown()
    figures = _figures(s, capacity, args.capacity is None, results)
    save_json(args.json, figures)
    if args.plots:
        for path in write_plots(series, args.plots):
            print("wrote", path)
    return figures


if __name__ == "__main__":
    main()
