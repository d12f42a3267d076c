"""Fault tolerance: what checkpoints cost, and how long an executor's death stops a dataflow.

Run: `python -m bench.recovery [--quick | --smoke] [--sizes small,large]
      [--parts throughput,alerts,recovery] [--capacity EPS] [--backends memory,rocksdb]
      [--standby N] [--baseline REV [--rounds N]] [--json FILE]`

With `--baseline REV`: rounds of (that commit, in a git worktree of its own, with this
environment; then this tree), each a process of its own with the other options, side by
side in one session; the JSON keeps each run's table rows (`rounds`).

The checkpointed dataflow, "bulk" (tenant analytics, target 1 s): source (ts, key, g, value,
size) -> two branches: key_by(key) -> a one-day tumbling window (`id="state"`: n, total,
lo, hi, mean, bytes per key) -> sink "totals", and key_by(g) -> a 100 ms tumbling count
over four groups -> sink "ticks". Event i has ts = i // 50, key i % keys (so `keys` events
put every key in state, and the state then stays that size), value (i % 1000) / 4 (exact
in binary: sums do not depend on order). The day-long window holds one entry per key and
fires only at the close; "ticks" gives results all along (about one row per group and
5,000 events). State sizes: "small" = 4,000 keys; "large" = 1,750,000 keys, about 100 MB
of checkpoint (`--quick`: 175,000 keys, about 10 MB); "huge" = 17,500,000 keys, about 1 GB
(only when asked for: `--sizes huge`).

Per state size and checkpoint interval (1 s and 5 s; `--quick`: 1 s only), on Ray:

- `checkpoint_overhead`: on a pool of one executor, the events/s of pushing a fixed set of
  events flat out (`keys * 1.5` events for large, so the state grows to full and is then
  updated; 600,000 for small, `--quick` 150,000) and `wait_idle`, with checkpoints at the
  interval divided by the same without (`fault_tolerance(checkpoint_interval_ms=0)`),
  for incremental parts (the default) and for full ones (`incremental=False`: the
  table's "full" rows). Measured side by side: rounds of (off, every interval
  incremental and full) in turn, `repeats` rounds (3; `--quick` 2), medians; each run
  deploys its own copy of bulk. `wait_idle` ends with a
  checkpoint of every checkpointed dataflow (exactly-once results become readable then):
  that last checkpoint is in the "with" time. The events are made before the clock starts.
- `alerts_p99_ms`: on the same pool (one executor: both tenants share its worker thread),
  "alerts" (`cameo_actors.examples.alerts_dataflow`: filter + map, target 50 ms, its own
  checkpoints off in every arm, so its results are readable at once) gets 300 events/s
  (a quarter of them alerts) while a bulk copy, once its state is full (keys events flat
  out), gets `load` (0.5) of its measured capacity, checkpointed at the interval
  (incremental or full) or not; p99 of egress - ingest of the alerts whose input came in
  the measured `measure_s` (12 s; `--quick` 4 s), the executor's busy share over it, the
  full passes of Python's cycle collector in it (`full_collector_passes`: count, ms, objects
  found unreachable), and
  bulk's last checkpoint then (its size and duration: `steady_checkpoint_mb`, `_s`).
  First alerts alone (no bulk), once: this machine's baseline at the time. Arms
  alternate (off, each interval incremental and full), `alerts_repeats` rounds (2;
  `--quick` 1), medians; the ratio is with / without.
- recovery, on a second pool of two executors (`monitor_interval_s` 0.2 s;
  `recovery_timeout_s` 300 s so that a slow restore of 100 MB is measured, not failed;
  `result_capacity` 4,000,000 rows, so that the day window's rows at the close fit its
  sink's log): alerts on
  executor 0 (checkpoints off), bulk checkpointed at the interval (delivery exactly-once,
  the default) alone on executor 1. The state fills, then bulk gets `load` of its capacity;
  once a checkpoint that started after the fill has completed and half an interval more
  has passed, executor 1's process is killed (SIGKILL). Ray starts it again, the controller
  restores bulk from its last checkpoint and replays the sources' ingress logs. Figures:
  `recovery_s`: from the kill to the first NEW result of bulk read (a row whose egress
  is after the kill; with exactly-once delivery it is readable only once the first
  checkpoint after the restore completed, so this includes one checkpoint);
  `first_egress_s`: from the kill to that row's egress (made, not yet readable);
  `detect_s` and `restore_s`: from the kill to the `recovering` transition of bulk's
  history, and from there to its return to `running`; `restore_phases`: what the controller
  measured of that restore (`checkpoints["last_restore"]`: waited for the executor Ray
  restarted, its parts read and unpacked, the state restored); `replayed_events`: an estimate (see
  `_pushed_between`); `checkpoint_mb` / `checkpoint_s`: the last checkpoint before the
  kill (`checkpoints["last_bytes"]`, `["last_duration_s"]`); `results_match`: after
  `after_s` more, the input stops, bulk is closed and finishes, and every result row of
  both sinks, read with commits across the failure, equals `run_local`'s engine
  (`cameo_actors.testing.LocalEngine`) on the same events, as a multiset (row count per
  sink and an order-independent hash of the rows, floats rounded to 6 digits); reads
  that got a bare KeyError from the executor's new process are counted
  (`reader_key_errors`, see `Reader`) and tried again. Alerts keep running on executor
  0: `alerts_kept_running` (never left `running`) and their p99 from the kill to the
  first new bulk result; `checkpoints_after_kill`: the first checkpoints that ended after
  the kill (began and ended, seconds after it; size, parts, incremental parts; `phases`:
  seconds from its first barrier to the last part past each phase, see `CheckpointPhases`), the
  table's `checkpoint_after_restore_s` the first completed one's duration. A run that
  fails keeps what it measured, with an `error`.

State backends (`--backends`, both by default): each is measured on pools of its own
(`RuntimeConfig.state_backend`), one after the other; every row names its `backend`, and
`rss_mb` is the killed executor's resident memory just before the kill. `--standby N`
gives the recovery pool N warm spare executors (`standby_executors`): the killed
executor's dataflow is then restored on a spare at once.

`--parts` measures only some of the three (the steady rate then comes from `--capacity`
or one run without checkpoints); `--sizes` only some sizes (the integration smoke test
runs `--smoke --sizes small`: `--quick`'s shape, one round of each, short arms).

Goals, reported and not asserted: recovery (to the first new result) under 5 s for about
100 MB of state; checkpoint overhead under 10% of throughput (ratio >= 0.9); alerts p99
with checkpoints within 1.2x of without. The machine is small and shared (2 cores): the
with/without figures are taken side by side in one run, in alternation, for that reason.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import signal
import statistics
import sys
import threading
import time
from array import array
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.harness.baseline import git, run_child, worktree
from bench.harness.cluster import ensure_ray, process_memory_mb
from bench.harness.feeds import ALERTS, AlertFeed
from bench.harness.fingerprint import Fingerprint
from bench.harness.output import REPO, save_json
from bench.harness.results import Latencies, Reader
from bench.harness.threads import check_threads
from cameo_actors import Dataflow, avg, count, max_, min_, sum_
from cameo_actors.examples import alerts_dataflow
from cameo_actors.operators.state_store import BACKENDS

BULK_SOURCE, STATE_STEP, STATE_SINK, TICK_SINK = "events", "state", "totals", "ticks"
SCHEMA = {"ts": "int", "key": "str", "g": "int", "value": "float", "size": "int"}
EVENTS_PER_MS = 50  # event time: ts = i // EVENTS_PER_MS
TICK_MS = 100
GROUPS = 4
DAY_MS = 86_400_000
#: Events per push call (the runtime sends them as one ingest call).
PUSH_EVENTS = 2_000
#: State sizes (`--sizes`; `Setup.keys`).
SIZES = ("small", "large", "huge")
#: bulk's state step (`--state`).
STATES = ("window", "process", "join", "session")
#: What is measured (`--parts`).
PARTS = ("throughput", "alerts", "recovery")
#: The goals (reported, not asserted).
GOAL_RECOVERY_S, GOAL_OVERHEAD, GOAL_ALERTS_X = 5.0, 0.9, 1.2


@dataclass(frozen=True)
class Setup:
    """One run's shape (`full()`, `quick()` or `smoke()`)."""

    intervals_s: tuple[float, ...]
    small_keys: int
    large_keys: int
    small_events: int  # pushed per throughput run, small state
    repeats: int  # throughput rounds
    alerts_repeats: int  # alerts-p99 rounds
    measure_s: float  # alerts p99, per arm
    after_s: float  # recovery: input goes on this long after the first new result
    large_events_factor: float = 1.5  # throughput run, large state: keys * this events
    load: float = 0.5  # share of the measured capacity bulk gets in the steady phases
    alerts_eps: float = 300.0
    seed: int = 11
    state: str = "window"  # the state step: window, process, join or session (`bulk_dataflow`)
    huge_keys: int = 17_500_000
    recovery_timeout_s: float = 300.0  # the kill to the first new result, at most

    @classmethod
    def full(cls) -> Setup:
        return cls(intervals_s=(1.0, 5.0), small_keys=4_000, large_keys=1_750_000,
                   small_events=600_000, repeats=3, alerts_repeats=2, measure_s=12.0,
                   after_s=3.0)

    @classmethod
    def quick(cls) -> Setup:
        return cls(intervals_s=(1.0,), small_keys=4_000, large_keys=175_000,
                   small_events=150_000, repeats=2, alerts_repeats=1, measure_s=4.0,
                   after_s=1.5)

    @classmethod
    def smoke(cls) -> Setup:
        """The integration smoke test's: every part measured once, briefly (figures not
        judged)."""
        return cls(intervals_s=(1.0,), small_keys=4_000, large_keys=175_000,
                   small_events=50_000, repeats=1, alerts_repeats=1, measure_s=1.5,
                   after_s=1.0)

    def keys(self, size: str) -> int:
        return {"small": self.small_keys, "huge": self.huge_keys}.get(size, self.large_keys)

    def throughput_events(self, size: str) -> int:
        return self.small_events if size == "small" else int(self.keys(size) * self.large_events_factor)


def bulk_dataflow(name: str, interval_s: float, incremental: bool = True,
                  state: str = "window", keys: int = 1) -> Dataflow:
    """The checkpointed tenant: a day-long keyed window (the state; with `state` "process",
    a keyed process keeping the same per key: `KeyTotals`; with "join", an interval join
    of each event with its key's next one, `keys` events later; with "session", a session
    window of a day's gap, the window's aggregates per key) and 100 ms tick counts
    (results all along); checkpoints every `interval_s` (0: off), incremental or full."""
    df = (Dataflow(name, latency_target_ms=1000, tenant="analytics", state_bytes=3_500_000_000)
          .fault_tolerance(checkpoint_interval_ms=interval_s * 1000, incremental=incremental))
    src = df.source(BULK_SOURCE, schema=SCHEMA, event_time="ts")
    if state == "process":
        (src.key_by("key").process("bench.harness.key_totals:KeyTotals", id=STATE_STEP)
         .sink(STATE_SINK))
    elif state == "join":
        # A key's events come `keys` events apart: each side holds about one event per
        # key, and each event pairs with its key's next one (one result per event).
        period = (keys // EVENTS_PER_MS) if keys % EVENTS_PER_MS == 0 else keys / EVENTS_PER_MS
        (src.key_by("key", id="lefts")
         .join(src.key_by("key", id="rights"), interval_ms=(period, period), id=STATE_STEP)
         .map({"key": "key", "ts": "ts", "a": "left.value", "b": "right.value",
               "bytes": "left.size + right.size"}, id="pairs")
         .sink(STATE_SINK))
    else:
        keyed = src.key_by("key")
        window = (keyed.window(session_gap_ms=DAY_MS, id=STATE_STEP) if state == "session" else
                  keyed.window(tumbling_ms=DAY_MS, id=STATE_STEP))
        (window.aggregate(n=count(), total=sum_("value"), lo=min_("value"), hi=max_("value"),
                          mean=avg("value"), bytes=sum_("size"))
         .sink(STATE_SINK))
    src.key_by("g").window(tumbling_ms=TICK_MS, id="tick").aggregate(n=count()).sink(TICK_SINK)
    return df


def alerts_flow() -> Dataflow:
    """alerts (filter + map, 50 ms), its own checkpoints off: only bulk's are measured."""
    return alerts_dataflow().fault_tolerance(checkpoint_interval_ms=0)


def make_events(first: int, n: int, keys: int) -> list[dict[str, Any]]:
    return [{"ts": i // EVENTS_PER_MS, "key": f"tenant-a/device-{i % keys:08d}", "g": i % GROUPS,
             "value": (i % 1000) / 4, "size": i % 1500} for i in range(first, first + n)]


class BulkFeed(threading.Thread):
    """Pushes bulk's events 0, 1, ...: the first `fill` flat out, then `rate` events/s
    (events due and not yet pushed, after a stall, go flat out). Logs (wall s, events
    pushed) after each push."""

    def __init__(self, rt: Any, name: str, keys: int, fill: int, rate: float) -> None:
        super().__init__(daemon=True, name=f"feed-{name}")
        self.rt, self.flow, self.keys, self.fill, self.rate = rt, name, keys, fill, rate
        self.pushed = 0
        self.log_t, self.log_n = array("d"), array("q")
        self.filled_at: float | None = None  # wall s when the fill was pushed
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            steady0, base = 0.0, 0
            while not self.stop.is_set():
                if self.pushed < self.fill:
                    n = min(PUSH_EVENTS, self.fill - self.pushed)
                else:
                    if self.filled_at is None:
                        self.filled_at, steady0, base = time.time(), time.monotonic(), self.pushed
                    n = min(PUSH_EVENTS, base + int((time.monotonic() - steady0) * self.rate)
                            - self.pushed)
                    if n <= 0:
                        time.sleep(0.005)
                        continue
                self.rt.push(self.flow, BULK_SOURCE, make_events(self.pushed, n, self.keys),
                             batch_size=PUSH_EVENTS)
                self.pushed += n
                self.log_t.append(time.time())
                self.log_n.append(self.pushed)
            self.rt.flush()
        except BaseException as e:  # reported by the main thread
            self.error = e

    def pushed_at(self, t: float) -> int:
        """Events pushed (push returned) by wall time t."""
        i = bisect.bisect_right(self.log_t, t)
        return self.log_n[i - 1] if i else 0


def _ckpt(info: dict[str, Any]) -> dict[str, Any]:
    c = info["checkpoints"]
    return {"completed": c["completed"], "failed": c["failed"],
            "last_mb": c["last_bytes"] / 1e6, "last_s": c["last_duration_s"]}


def _wait_checkpointed(rt: Any, name: str, timeout_s: float) -> None:
    """Wait until a checkpoint of `name` completed (its duration is then known), or
    `timeout_s` passed (the figure stays unknown)."""
    deadline = time.monotonic() + timeout_s
    while not rt.describe(name, refresh=True)["checkpoints"]["last_duration_s"] \
            and time.monotonic() < deadline:
        time.sleep(0.1)


def _wait_events_in(rt: Any, name: str, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while rt.stats(name)["events_in"] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: fewer than {n:,} events in after {timeout_s:g} s")
        time.sleep(0.05)


def _median(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


#: An arm of the side-by-side runs: (checkpoint interval s, 0 = off; incremental parts).
Arm = tuple[float, bool]
OFF: Arm = (0.0, True)


def _arms(intervals: tuple[float, ...]) -> list[Arm]:
    """One round: off, then each interval with incremental parts, then with full ones."""
    return [OFF, *((iv, inc) for iv in intervals for inc in (True, False))]


def _label(arm: Arm) -> str:
    return "off" if not arm[0] else f"{arm[0]:g} s{'' if arm[1] else ' full'}"


def _busy(rt: Any) -> tuple[float, float]:
    """(wall ms, the executors' busy ms so far, summed)."""
    return time.time() * 1000, sum(e["busy_ms"] for e in rt.executor_stats())


def _full_passes(rt: Any) -> tuple[int, float]:
    """(the executors' full passes of Python's cycle collector so far, their ms, the objects
    they found unreachable), summed."""
    gcs = [e["gc"] for e in rt.executor_stats() if "gc" in e]
    return (sum(g["collections"][2] for g in gcs), sum(g["total_ms"][2] for g in gcs),
            sum(g["collected"][2] for g in gcs))


def _busy_share(a: tuple[float, float], b: tuple[float, float], executors: int) -> float:
    """The executors' mean busy share of the wall time from `a` to `b`."""
    return (b[1] - a[1]) / ((b[0] - a[0]) * executors)


# -- throughput ---------------------------------------------------------------------------------
def _throughput_run(rt: Any, name: str, arm: Arm, events: list[dict[str, Any]], state: str,
                    keys: int) -> tuple[float, dict[str, Any]]:
    """A fresh bulk copy: `events` pushed flat out, then `wait_idle`; (events/s, its
    checkpoints)."""
    rt.deploy(bulk_dataflow(name, *arm, state=state, keys=keys))
    try:
        t0 = time.perf_counter()
        rt.push(name, BULK_SOURCE, events, batch_size=PUSH_EVENTS)
        rt.wait_idle(timeout_s=900)
        elapsed = time.perf_counter() - t0
        got = rt.stats(name)["events_in"]
        if got != len(events):
            raise RuntimeError(f"{name}: {got:,} events in, {len(events):,} pushed")
        return len(events) / elapsed, _ckpt(rt.describe(name, refresh=True))
    finally:
        rt.cancel(name)


def throughput(rt: Any, s: Setup, size: str, log: Any = print) -> dict[str, Any]:
    """Events/s flat out to idle, per arm (off, each interval incremental and full), rounds
    of every arm in turn. `by_interval[iv]` holds the incremental arm, and its "full"."""
    keys, n = s.keys(size), s.throughput_events(size)
    events = make_events(0, n, keys)
    runs: dict[Arm, list[float]] = {arm: [] for arm in _arms(s.intervals_s)}
    ckpts: dict[Arm, list[dict[str, Any]]] = {arm: [] for arm in runs}
    for r in range(s.repeats):
        for arm in runs:
            eps, ck = _throughput_run(rt, f"tp-{size}-{_label(arm).replace(' ', '')}-{r}", arm,
                                      events, s.state, keys)
            runs[arm].append(eps)
            ckpts[arm].append(ck)
        log(f"  throughput round {r + 1}: " + ", ".join(
            f"{_label(arm)} {runs[arm][-1] / 1e3:,.0f}k" for arm in runs) + " events/s")
    off = _median(runs[OFF])

    def arm_figures(arm: Arm) -> dict[str, Any]:
        return {"on_eps": _median(runs[arm]), "on_runs": runs[arm],
                "ratio": _ratio(_median(runs[arm]), off),
                "ratio_runs": [a / b for a, b in zip(runs[arm], runs[OFF], strict=True)],
                "checkpoints": ckpts[arm]}

    return {"events": n, "keys": keys, "off_eps": off, "off_runs": runs[OFF],
            "by_interval": {iv: {**arm_figures((iv, True)), "full": arm_figures((iv, False))}
                            for iv in s.intervals_s}}


# -- alerts p99 beside a checkpointed bulk tenant ----------------------------------------------
def alerts_p99(rt: Any, s: Setup, size: str, capacity: float, log: Any = print) -> dict[str, Any]:
    """Alerts' p99 with bulk (full state, `load` of capacity) checkpointed at each interval
    (incremental and full) or not, arms in turn; the executor's busy share in each, and
    bulk's last checkpoint (size, duration) in each."""
    keys = s.keys(size)
    rate = s.load * capacity
    rt.deploy(alerts_flow())
    lat = Latencies()
    reader = Reader(rt.handle(), ALERTS, ("alerts",), lat.add)
    feed_a = AlertFeed(rt.handle(), s.alerts_eps, s.seed)
    reader.start()
    feed_a.start()
    p99s: dict[Arm, list[float]] = {arm: [] for arm in _arms(s.intervals_s)}
    counts: dict[Arm, list[int]] = {arm: [] for arm in p99s}
    busy: dict[Arm, list[float]] = {arm: [] for arm in p99s}
    passes: dict[Arm, list[tuple[int, float, int]]] = {arm: [] for arm in p99s}
    ckpts: dict[Arm, list[dict[str, Any]]] = {arm: [] for arm in p99s}
    executors = len(rt.executor_stats())
    try:
        time.sleep(1.0)  # alerts alone first: the baseline of this machine, now
        m0 = time.time() * 1000
        time.sleep(s.measure_s)
        time.sleep(0.5)
        check_threads(reader, feed_a)
        alone, alone_n = lat.p99(m0, m0 + s.measure_s * 1000)
        for r in range(s.alerts_repeats):
            for arm in p99s:
                name = rt.deploy(bulk_dataflow(
                    f"al-{size}-{_label(arm).replace(' ', '')}-{r}", *arm, state=s.state,
                    keys=keys))
                feed = BulkFeed(rt.handle(), name, keys, keys, rate)
                feed.start()
                try:
                    _wait_events_in(rt, name, keys, 600)
                    check_threads(feed, reader, feed_a)
                    time.sleep(1.0)  # the fill's queues drain
                    b0, g0 = _busy(rt), _full_passes(rt)
                    m0 = time.time() * 1000
                    time.sleep(s.measure_s)
                    m1 = time.time() * 1000
                    busy[arm].append(_busy_share(b0, _busy(rt), executors))
                    g1 = _full_passes(rt)
                    passes[arm].append((g1[0] - g0[0], round(g1[1] - g0[1], 1), g1[2] - g0[2]))
                    check_threads(feed, reader, feed_a)
                    if arm != OFF:  # a short window may close before its first checkpoint
                        _wait_checkpointed(rt, name, 60)
                    ckpts[arm].append(_ckpt(rt.describe(name, refresh=True)))
                finally:
                    feed.stop.set()
                    feed.join(120)
                    rt.cancel(name)
                time.sleep(0.5)  # the last alerts of the arm are read
                p99, n = lat.p99(m0, m1)
                if p99 is not None:
                    p99s[arm].append(p99)
                counts[arm].append(n)
            log(f"  alerts p99 round {r + 1}: " + ", ".join(
                f"{_label(arm)} {p99s[arm][-1] if p99s[arm] else float('nan'):,.1f} ms "
                f"(busy {busy[arm][-1]:.2f}, {passes[arm][-1][0]} full collector passes "
                f"{passes[arm][-1][1]:,.0f} ms found {passes[arm][-1][2]} unreachable, last checkpoint {ckpts[arm][-1]['last_mb']:,.1f} MB "
                f"in {ckpts[arm][-1]['last_s'] or 0:.2f} s)" for arm in p99s))
    finally:
        feed_a.stop.set()
        feed_a.join(60)
        reader.stop.set()
        reader.join(60)
        rt.cancel(ALERTS)
    check_threads(feed_a, reader)
    off = _median(p99s[OFF])
    log(f"  alerts p99 alone (no bulk): {alone if alone is None else round(alone, 1)} ms")

    def arm_figures(arm: Arm) -> dict[str, Any]:
        return {"on_p99_ms": _median(p99s[arm]), "on_runs": p99s[arm],
                "ratio": _ratio(_median(p99s[arm]), off), "alerts": counts[arm],
                "busy": _median(busy[arm]), "busy_runs": busy[arm],
                "full_collector_passes": passes[arm],
                "checkpoint_mb": _median([c["last_mb"] for c in ckpts[arm]]),
                "checkpoint_s": _median([c["last_s"] for c in ckpts[arm] if c["last_s"]]),
                "checkpoints": ckpts[arm]}

    return {"bulk_rate_eps": rate, "alone_p99_ms": alone, "alone_alerts": alone_n,
            "off_p99_ms": off, "off_runs": p99s[OFF], "alerts": counts[OFF],
            "off_busy": _median(busy[OFF]),
            "by_interval": {iv: {**arm_figures((iv, True)), "full": arm_figures((iv, False))}
                            for iv in s.intervals_s}}


# -- recovery -----------------------------------------------------------------------------------
def _pushed_between(feed: BulkFeed, lo: float, hi: float) -> int:
    """Events pushed (the push returned) between wall times lo and hi. With lo = the start of
    the last checkpoint completed before the kill (its `last_at - last_duration_s`), this
    approximates the events the restore replays from the ingress log: the checkpoint's
    source positions are taken when its barrier reaches the source, a little after that
    start, and a push that returned may not have been applied yet (calls in flight). With
    lo = `last_at` (its commit) it is the lower bound the brief suggests."""
    return feed.pushed_at(hi) - feed.pushed_at(lo)


def _transitions(history: list[dict[str, Any]], after: float) -> tuple[float | None, float | None]:
    """(when bulk entered `recovering`, when it was `running` again) at or after `after`."""
    rec = back = None
    for h in history:
        if h["at"] < after - 1.0:
            continue
        if h["state"] == "recovering" and rec is None:
            rec = h["at"]
        elif h["state"] == "running" and rec is not None and back is None:
            back = h["at"]
    return rec, back


def reference(keys: int, n: int, state: str) -> Fingerprint:
    """bulk's results on events 0..n-1 by `run_local`'s engine, in-process."""
    from cameo_actors.testing import LocalEngine

    engine = LocalEngine(bulk_dataflow("reference", 0, state=state, keys=keys).spec)
    fp = Fingerprint()

    def drain() -> None:
        for sink in (STATE_SINK, TICK_SINK):
            out = engine.result.sinks.setdefault(sink, [])
            for row in out:
                fp.add(sink, row)
            out.clear()

    for first in range(0, n, 50_000):
        engine.push(BULK_SOURCE, make_events(first, min(50_000, n - first), keys))
        drain()
    engine.finish()
    drain()
    return fp


def _wait_finished_logged(rt: Any, name: str, timeout_s: float, reads: Any, log: Any) -> None:
    """Wait for `name` to finish after its close; a failure raises at once with its cause,
    and progress (checkpoints, backlog, rows read) is logged every 30 s."""
    began = time.monotonic()
    said = began
    while True:
        info = rt.describe(name, refresh=True)
        if info["state"] == "finished":
            return
        if info["state"] in ("failed", "cancelled"):
            raise RuntimeError(f"{name} {info['state']} after close: {info['cause']}")
        now = time.monotonic()
        c = info["checkpoints"]
        note = (f"{name} {info['state']} {now - began:.0f} s after close: checkpoints "
                f"{c['completed']} done, {c['failed']} failed, last {c['last_bytes'] / 1e6:,.1f} MB "
                f"in {c['last_duration_s'] or 0:.1f} s; {reads():,} rows read")
        if now - began > timeout_s:
            raise TimeoutError(f"not finished in {timeout_s:g} s: {note}")
        if now - said > 30:
            log(f"  {note}")
            said = now
        time.sleep(0.2)


def recovery(rt: Any, s: Setup, size: str, interval: float, rate: float, log: Any = print
             ) -> dict[str, Any]:
    """Kill the executor of a checkpointed bulk copy; time its way back; check its results.
    What was measured before a failure is kept: the figures then have an `error`."""
    keys = s.keys(size)
    name = f"rec-{size}-{interval:g}"
    fig: dict[str, Any] = {"keys": keys, "rate_eps": rate}
    rt.deploy(alerts_flow())
    rt.deploy(bulk_dataflow(name, interval, state=s.state, keys=keys))
    threads: list[Any] = []
    feed: BulkFeed | None = None
    got = Fingerprint()
    try:
        hosts = rt.describe(name, refresh=True)["hosts"]
        victim = fig["executor_killed"] = hosts[f"{name}/{STATE_STEP}/0"]
        alerts_on = sorted(set(rt.describe(ALERTS, refresh=True)["hosts"].values()))
        if victim in alerts_on:
            raise RuntimeError(f"bulk's window shares executor {victim} with alerts: killing it "
                               "would fail alerts (checkpoints off); expected them apart")

        kill = {"ms": float("inf")}
        first_new: dict[str, float] = {}

        def on_bulk(sink: str, rows: list[Any]) -> None:
            read_at = time.time()
            for ev, _, eg in rows:
                got.add(sink, ev)
                if eg > kill["ms"] and not first_new:
                    first_new.update(read_at=read_at, egress_ms=eg)

        lat = Latencies()
        reader = Reader(rt.handle(), name, (STATE_SINK, TICK_SINK), on_bulk, idle_s=0.01)
        reader_a = Reader(rt.handle(), ALERTS, ("alerts",), lat.add)
        feed = BulkFeed(rt.handle(), name, keys, keys, rate)
        feed_a = AlertFeed(rt.handle(), s.alerts_eps, s.seed)
        threads = [reader, reader_a, feed, feed_a]
        for t in threads:
            t.start()
        _wait_events_in(rt, name, keys, 900)
        filled = time.time()
        # A checkpoint of the whole state (started after the fill) completed, then half an
        # interval more: the kill falls between checkpoints.
        deadline = time.monotonic() + 300
        while True:
            check_threads(reader, reader_a, feed, feed_a)
            c = rt.describe(name, refresh=True)["checkpoints"]
            if c["last_at"] is not None and c["last_at"] - (c["last_duration_s"] or 0) > filled:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: no checkpoint completed after the fill: {c}")
            time.sleep(0.05)
        time.sleep(max(0.0, c["last_at"] + interval / 2 - time.time()))
        before = rt.describe(name, refresh=True)
        c = before["checkpoints"]
        pid = _pid(rt, victim)
        fig["rss_mb_before"] = process_memory_mb(pid, "VmRSS")
        kill_t = time.time()
        kill["ms"] = kill_t * 1000
        os.kill(pid, signal.SIGKILL)
        fig.update({
            "pushed_at_kill": feed.pushed_at(kill_t), "since_checkpoint_s": kill_t - c["last_at"],
            "checkpoint_mb": c["last_bytes"] / 1e6, "checkpoint_s": c["last_duration_s"],
            "checkpoints_before_kill": c["completed"],
            "state_mb_estimated": before["state_bytes"] / 1e6})
        log(f"  killed executor {victim} (pid {pid}): {feed.pushed:,} events pushed, last "
            f"checkpoint {c['last_bytes'] / 1e6:,.1f} MB in {c['last_duration_s'] or 0:.2f} s, "
            f"{kill_t - c['last_at']:.2f} s before")

        deadline = time.monotonic() + s.recovery_timeout_s
        while not first_new:
            check_threads(reader, reader_a, feed, feed_a)
            if time.monotonic() > deadline:
                info = rt.describe(name, refresh=True)
                raise TimeoutError(f"{name}: no new result {s.recovery_timeout_s:g} s after the "
                                   f"kill; state {info['state']}, cause {info['cause']}, "
                                   f"checkpoints {info['checkpoints']}")
            time.sleep(0.005)
        recovered_at = first_new["read_at"]
        a_p99, a_n = lat.p99(kill["ms"], recovered_at * 1000)
        info = rt.describe(name, refresh=True)
        rec_at, back_at = _transitions(info["history"], kill_t)
        fig.update({
            "recovery_s": recovered_at - kill_t,
            "first_egress_s": first_new["egress_ms"] / 1000 - kill_t,
            "detect_s": rec_at - kill_t if rec_at is not None else None,
            "restore_s": back_at - rec_at if rec_at is not None and back_at is not None else None,
            "replayed_events": _pushed_between(feed, c["last_at"] - (c["last_duration_s"] or 0), kill_t),
            "pushed_since_commit": _pushed_between(feed, c["last_at"], kill_t),
            "alerts_p99_during_recovery_ms": a_p99, "alerts_during_recovery": a_n,
            # the restore's phases (waited for the executor, read + unpacked, restored)
            "restore_phases": info["checkpoints"].get("last_restore")})
        # Exactly-once results are read once a checkpoint after them commits: when the
        # first ones after the restore began and ended says where the last leg goes.
        fig["checkpoints_after_kill"] = [
            {"began_s": round(h["at"] - h["duration_s"] - kill_t, 3),
             "ended_s": round(h["at"] - kill_t, 3), "ok": h["ok"], "mb": h["bytes"] / 1e6,
             "incremental_parts": h["incremental_parts"], "parts": h["parts"],
             "phases": h.get("phases")}
            for h in info["checkpoints"].get("history", []) if h["at"] >= kill_t][:3]
        log(f"  checkpoints after the kill: {fig['checkpoints_after_kill']}")
        log(f"  first new result {fig['recovery_s']:.2f} s after the kill (made at "
            f"{fig['first_egress_s']:.2f} s; detected {fig['detect_s']} s, restore {fig['restore_s']} s: "
            f"{fig['restore_phases']})")
        time.sleep(s.after_s)
        check_threads(reader, reader_a, feed, feed_a)
        feed.stop.set()
        feed.join(300)
        feed_a.stop.set()
        feed_a.join(60)
        check_threads(feed, feed_a)
        fig["events"] = feed.pushed
        fig["alerts_kept_running"] = {h["state"] for h in rt.describe(ALERTS, refresh=True)["history"]
                                      if h["at"] >= kill_t} <= {"running"}
        fig["rss_mb_after"] = _rss_mb(rt, victim)
        rt.close(name)
        _wait_finished_logged(rt, name, 900, lambda: sum(got.rows.values()), log)
        reader.stop.set()
        reader.join(300)
        check_threads(reader)
        while reader.read_once():  # the last results
            pass
        reader_a.stop.set()
        reader_a.join(60)
        check_threads(reader_a)
        final = rt.describe(name, refresh=True)
        fig.update({
            "checkpoints_failed": final["checkpoints"]["failed"],
            "recoveries": final["recoveries"], "final_state": final["state"],
            "history": [{"state": h["state"], "at_s": round(h["at"] - kill_t, 3),
                         "reason": h["reason"]} for h in final["history"] if h["at"] >= kill_t - 1.0],
            "reader_key_errors": reader.key_errors})
        began = time.monotonic()
        expected = reference(keys, feed.pushed, s.state)
        log(f"  reference: {sum(expected.rows.values()):,} rows from {feed.pushed:,} events in "
            f"{time.monotonic() - began:.1f} s")
        fig.update({"results_match": got == expected, "result_rows": got.rows,
                    "expected_rows": expected.rows})
    except Exception as e:
        fig["error"] = f"recovery: {e!r}"
        fig["result_rows_read"] = got.rows
        with contextlib.suppress(Exception):
            info = rt.describe(name, refresh=True)
            fig["state_at_error"] = {"state": info["state"], "cause": info["cause"],
                                     "checkpoints": info["checkpoints"],
                                     "recoveries": info["recoveries"],
                                     "history": info["history"][-8:]}
        if feed is not None:
            fig["events"] = feed.pushed
        if threads:
            fig["reader_key_errors"] = threads[0].key_errors
    finally:
        for t in threads:  # stopped already unless something failed
            t.stop.set()
        for n in (name, ALERTS):  # frees a finished one's results too
            with contextlib.suppress(Exception):  # do not hide what failed before
                rt.cancel(n)
    return fig


def _pid(rt: Any, executor: int, timeout_s: float = 30.0) -> int:
    """The executor's process id; its stats are asked again while it is too busy to give
    them (an entry without "pid": the call timed out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        entry = next(e for e in rt.executor_stats() if e["executor"] == executor)
        if "pid" in entry or time.monotonic() > deadline:
            return int(entry["pid"])
        time.sleep(0.2)


def _rss_mb(rt: Any, executor: int) -> float | None:
    """VmRSS of an executor's (new) process, MB (None while it is too busy to say)."""
    for e in rt.executor_stats():
        if e["executor"] == executor and "pid" in e:
            return process_memory_mb(e["pid"], "VmRSS")
    return None


# -- report -------------------------------------------------------------------------------------
def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (state backend, interval, size, parts: incremental or full): the
    table and the goals read these. Recovery is measured with incremental parts (the
    default) only."""
    state = results.get("state", "window")
    return [{"state": state, **row} for backend, runs in results["backends"].items()
            for row in _rows(backend, runs)]


def _rows(backend: str, results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for size, r in results["sizes"].items():
        tp_all, al_all = r.get("throughput", {}), r.get("alerts", {})
        for iv in r["intervals"]:
            for parts in ("incremental", "full"):
                tp = tp_all.get("by_interval", {}).get(iv, {})
                al = al_all.get("by_interval", {}).get(iv, {})
                tp, al = (tp, al) if parts == "incremental" else (tp.get("full", {}), al.get("full", {}))
                rec = r.get("recovery", {}).get(iv, {}) if parts == "incremental" else {}
                out.append({
                    "backend": backend, "interval_s": iv, "size": size, "parts": parts,
                    "keys": r["keys"], "rss_mb": rec.get("rss_mb_before"),
                    "steady_checkpoint_mb": al.get("checkpoint_mb"),
                    "steady_checkpoint_s": al.get("checkpoint_s"),
                    "checkpoint_mb": rec.get("checkpoint_mb"), "checkpoint_s": rec.get("checkpoint_s"),
                    "throughput_off_eps": tp_all.get("off_eps"),
                    "throughput_on_eps": tp.get("on_eps"), "checkpoint_overhead": tp.get("ratio"),
                    "alerts_p99_alone_ms": al_all.get("alone_p99_ms"),
                    "alerts_p99_off_ms": al_all.get("off_p99_ms"), "busy_off": al_all.get("off_busy"),
                    "alerts_p99_on_ms": al.get("on_p99_ms"), "alerts_p99_ratio": al.get("ratio"),
                    "busy_on": al.get("busy"),
                    "recovery_s": rec.get("recovery_s"), "restore_s": rec.get("restore_s"),
                    "detect_s": rec.get("detect_s"), "replayed_events": rec.get("replayed_events"),
                    "checkpoint_after_restore_s": _first_ok_duration(rec.get("checkpoints_after_kill")),
                    "results_match": rec.get("results_match"),
                    "error": "; ".join(str(e) for e in (r.get("error"), al_all.get("error"),
                                                        rec.get("error")) if e) or None,
                })
    return out


def _first_ok_duration(after: list[dict[str, Any]] | None) -> float | None:
    """How long the first checkpoint that completed after the kill took (its barriers
    wait behind the replay; the first new results are read once it completes)."""
    ok = [c for c in after or () if c["ok"]]
    return round(ok[0]["ended_s"] - ok[0]["began_s"], 3) if ok else None


def row_key(r: dict[str, Any]) -> str:
    """A row's name in the goals: "rocksdb/large@1s"."""
    return f"{r['backend']}/{r['size']}@{r['interval_s']:g}s"


def goals(table: list[dict[str, Any]]) -> dict[str, Any]:
    """Each goal per row with incremental parts (the default): met (True/False), or None
    when not measured."""
    def check(field: str, ok: Any, sizes: tuple[str, ...] = ("small", "large")) -> dict[str, Any]:
        per = {row_key(r): (None if r[field] is None else bool(ok(r[field])))
               for r in table if r["size"] in sizes and r["parts"] == "incremental"}
        if not per or any(v is None for v in per.values()):
            return {"per_row": per, "met": None}  # not (all) measured
        return {"per_row": per, "met": all(per.values())}

    return {
        "recovery_under_5s_large_state": check("recovery_s", lambda v: v < GOAL_RECOVERY_S, ("large",)),
        "checkpoint_overhead_under_10pct": check("checkpoint_overhead", lambda v: v >= GOAL_OVERHEAD),
        "alerts_p99_within_1_2x": check("alerts_p99_ratio", lambda v: v <= GOAL_ALERTS_X),
    }


def _f(v: Any, fmt: str, width: int) -> str:
    return f"{'-' if v is None else format(v, fmt):>{width}}"


def print_table(table: list[dict[str, Any]], g: dict[str, Any]) -> None:
    head = (f"{'backend':>8} {'interval':>8} {'size':>5} {'parts':>11} {'keys':>10} {'ckpt MB':>8} {'ckpt s':>6} "
            f"{'tp off/s':>9} {'tp on/s':>9} {'tp ratio':>8} {'alerts p99 alone':>16} {'off':>11} "
            f"{'on':>11} {'ratio':>6} {'busy off':>8} {'on':>5} {'recovery s':>10} {'restore s':>9} "
            f"{'replayed':>9} {'match':>5}")
    print(head)
    print("-" * len(head))
    for r in table:
        match = "-" if r["results_match"] is None else ("yes" if r["results_match"] else "NO")
        print(f"{r['backend']:>8} {r['interval_s']:>6g} s {r['size']:>5} {r['parts']:>11} {r['keys']:>10,} "
              f"{_f(r['steady_checkpoint_mb'], ',.1f', 8)} {_f(r['steady_checkpoint_s'], '.2f', 6)} "
              f"{_f(r['throughput_off_eps'], ',.0f', 9)} "
              f"{_f(r['throughput_on_eps'], ',.0f', 9)} {_f(r['checkpoint_overhead'], '.2f', 8)} "
              f"{_f(r['alerts_p99_alone_ms'], ',.1f', 13)} ms {_f(r['alerts_p99_off_ms'], ',.1f', 8)} ms "
              f"{_f(r['alerts_p99_on_ms'], ',.1f', 8)} ms "
              f"{_f(r['alerts_p99_ratio'], '.2f', 6)} {_f(r['busy_off'], '.2f', 8)} "
              f"{_f(r['busy_on'], '.2f', 5)} {_f(r['recovery_s'], '.2f', 10)} "
              f"{_f(r['restore_s'], '.2f', 9)} {_f(r['replayed_events'], ',', 9)} {match:>5}")
        if r["error"]:
            print(f"{'':>8} error: {r['error']}")
    print("ckpt MB / s: bulk's last checkpoint at the end of its steady alerts arm (its size, "
          "barriers to manifest); busy: the executor's busy share in the alerts arms")
    labels = {"recovery_under_5s_large_state": "recovery under 5 s for large state (~100 MB full)",
              "checkpoint_overhead_under_10pct": "checkpoint overhead under 10% (ratio >= 0.9)",
              "alerts_p99_within_1_2x": "alerts p99 with checkpoints within 1.2x of without"}
    print("goals (incremental parts, the default):")
    for k, label in labels.items():
        per = ", ".join(f"{row} {'-' if v is None else ('met' if v else 'NOT met')}"
                        for row, v in g[k]["per_row"].items())
        met = {None: "not measured", True: "MET", False: "NOT MET"}[g[k]["met"]]
        print(f"  {label}: {met}" + (f" ({per})" if per else ""))


def _figures(s: Setup, results: dict[str, Any]) -> dict[str, Any]:
    table = rows(results)
    return {"setup": {**asdict(s), "pools": "throughput and alerts: one executor; recovery: two; "
                                           "a pool of each per state backend, one at a time"},
            **results, "table": table, "goals": goals(table)}


def run_size(s: Setup, size: str, shared: Any, kill: Any, parts: tuple[str, ...] = PARTS,
             capacity: float | None = None, log: Any = print) -> dict[str, Any]:
    """The measurements `parts` of one state size; a failed one is recorded (`error`), not
    raised. The steady phases' rate is `load` of the capacity: the throughput's median
    without checkpoints, else `capacity`, else one run without checkpoints measures it.
    `phase_s`: how long each part took (wall)."""
    out: dict[str, Any] = {"keys": s.keys(size), "intervals": list(s.intervals_s), "phase_s": {}}
    t = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.monotonic()
        out["phase_s"][phase] = round(now - t, 1)
        t = now

    try:
        if "throughput" in parts:
            out["throughput"] = throughput(shared, s, size, log)
            capacity = out["throughput"]["off_eps"]
        elif capacity is None:
            capacity = _throughput_run(shared, f"cap-{size}", OFF,
                                       make_events(0, s.throughput_events(size), s.keys(size)),
                                       s.state)[0]
            log(f"  capacity without checkpoints: {capacity:,.0f} events/s")
    except Exception as e:
        out["error"] = f"throughput: {e!r}"
        log(f"  throughput failed: {e!r}")
        return out
    finally:
        lap("throughput")
    out["capacity_eps"] = capacity
    if "alerts" in parts:
        try:
            out["alerts"] = alerts_p99(shared, s, size, capacity, log)
        except Exception as e:
            out["alerts"] = {"error": f"alerts p99: {e!r}"}
            log(f"  alerts p99 failed: {e!r}")
        lap("alerts")
    if "recovery" not in parts:
        return out
    out["recovery"] = {}
    for iv in s.intervals_s:
        r = out["recovery"][iv] = recovery(kill, s, size, iv, s.load * capacity, log)
        if r.get("error"):
            log(f"  recovery at {iv:g} s failed: {r['error']}")
        else:
            log(f"  recovery at {iv:g} s: first new result {r['recovery_s']:.2f} s after the kill "
                f"(restore {r['restore_s'] if r['restore_s'] is None else round(r['restore_s'], 2)} s), "
                f"~{r['replayed_events']:,} events replayed, results match: {r['results_match']}")
        if r.get("reader_key_errors"):
            log(f"  {r['reader_key_errors']} reads got a bare KeyError (retried)")
        lap(f"recovery_{iv:g}s")
    log(f"  {size}: " + ", ".join(f"{k} {v:.0f} s" for k, v in out["phase_s"].items()))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="interval 1 s only, large = 175,000 keys (~10 MB), short arms")
    size.add_argument("--smoke", action="store_true",
                      help="--quick's shape, one round of each part, 1.5 s arms (tests)")
    parser.add_argument("--sizes", default="small,large",
                        help="comma-separated, of small, large, huge (about 1 GB)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--capacity", type=float,
                        help="bulk's events/s without checkpoints when throughput is not "
                             "measured (else one run measures it)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated state backends, of {', '.join(BACKENDS)}: each "
                             f"measured on pools of its own, one after the other")
    parser.add_argument("--state", choices=STATES, default="window",
                        help="bulk's state step: the day-long window (aligned windows' state), "
                             "a keyed process keeping the same per key (state kept per key), "
                             "an interval join of each event with its key's next one "
                             "(events kept per key), or a session window of a day's gap "
                             "(sessions kept per key)")
    parser.add_argument("--standby", type=int, default=0,
                        help="standby executors of the recovery pool (RuntimeConfig."
                             "standby_executors): the killed executor's dataflows are restored "
                             "on a spare instead of after Ray restarted it (default 0)")
    parser.add_argument("--baseline", help="a commit to run, in a worktree of its own, before "
                                           "each run of this tree (each a process of its own)")
    parser.add_argument("--rounds", type=int, default=1, help="with --baseline: rounds of both")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.baseline:
        return side_by_side(args.baseline, args.rounds, _child_args(args), args.json)
    backends = [x.strip() for x in args.backends.split(",") if x.strip()]
    if not backends or set(backends) - set(BACKENDS):
        parser.error(f"unknown backends {sorted(set(backends) - set(BACKENDS))}; expected some "
                     f"of {BACKENDS}")
    s = Setup.smoke() if args.smoke else Setup.quick() if args.quick else Setup.full()
    s = replace(s, state=args.state)
    sizes = [x.strip() for x in args.sizes.split(",") if x.strip()]
    if set(sizes) - set(SIZES):
        parser.error(f"unknown sizes {sorted(set(sizes) - set(SIZES))}; expected some of {SIZES}")
    parts = tuple(x.strip() for x in args.parts.split(",") if x.strip())
    if set(parts) - set(PARTS):
        parser.error(f"unknown parts {sorted(set(parts) - set(PARTS))}; expected some of {PARTS}")

    from cameo_actors.runtime import Runtime, RuntimeConfig

    started = ensure_ray()
    t0 = time.monotonic()
    results: dict[str, Any] = {"backends": {}, "standby_executors": args.standby,
                               "state": args.state}
    try:
        for backend in backends:
            runs = results["backends"][backend] = {"sizes": {}}
            shared = Runtime.start(RuntimeConfig(num_executors=1, monitor_interval_s=0.2,
                                                 state_backend=backend),
                                   pool=f"bench-recovery-shared-{backend}")
            # Room for the whole day window's rows at the close, and a restore of 100 MB
            # measured rather than failed at the default 60 s.
            kill = Runtime.start(RuntimeConfig(num_executors=2, monitor_interval_s=0.2,
                                               result_capacity=4_000_000,
                                               recovery_timeout_s=300.0, state_backend=backend,
                                               standby_executors=args.standby),
                                 pool=f"bench-recovery-kill-{backend}")
            try:
                for size in sizes:
                    print(f"{backend}, {size} state ({s.keys(size):,} keys):")
                    runs["sizes"][size] = run_size(s, size, shared, kill, parts, args.capacity)
                    save_json(args.json, _figures(s, results))
            finally:
                shared.shutdown(stop_ray=False)
                kill.shutdown(stop_ray=False)
        results["elapsed_s"] = time.monotonic() - t0
        print(f"done in {results['elapsed_s']:.0f} s")
    finally:
        if started:
            import ray

            ray.shutdown()
    figures = _figures(s, results)
    print_table(figures["table"], figures["goals"])
    save_json(args.json, figures)
    return figures


#: One run in a process of its own, from the tree it is started in (`side_by_side`).
CHILD = """
import sys
from bench.harness.output import save_json
from bench.recovery import main
save_json(sys.argv[1], main(sys.argv[2:]))
"""


def _child_args(args: argparse.Namespace) -> list[str]:
    """The command line of one run of each arm: this one's, without the side by side."""
    out = ["--quick"] if args.quick else ["--smoke"] if args.smoke else []
    out += ["--sizes", args.sizes, "--parts", args.parts, "--backends", args.backends,
            "--standby", str(args.standby), "--state", args.state]
    return out + (["--capacity", str(args.capacity)] if args.capacity else [])


def side_by_side(baseline: str, rounds: int, child_args: list[str], path: str | None
                 ) -> dict[str, Any]:
    """Rounds of (`baseline` in a worktree of its own, this tree), each run a process of its
    own with `child_args`: the two side by side in one session, as the machine's speed
    varies from day to day. Each run's table rows are kept (`rounds`)."""
    figures: dict[str, Any] = {"baseline": git("rev-parse", "--short=10", baseline),
                               "args": child_args, "rounds": []}
    with worktree(baseline) as base:
        assert base is not None
        for i in range(rounds):
            for arm, tree in (("baseline", base), ("this tree", Path(REPO))):
                print(f"round {i + 1} of {rounds}, {arm}:", flush=True)
                got = run_child(CHILD, child_args, tree, 3600.0, f"bench.recovery ({arm})")
                figures["rounds"].append({"round": i + 1, "arm": arm, "table": got["table"],
                                          "measured_on": got.get("measured_on")})
                save_json(path, figures)
    return figures


if __name__ == "__main__":
    figs = main()
    runs = [figs] if "table" in figs else figs["rounds"]  # one run, or side by side
    sys.exit(1 if any(r["error"] for run in runs for r in run["table"]) else 0)
