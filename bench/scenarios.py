"""Scenarios of `python -m bench.cameo`: single, multi, spike and fair, each under several modes.

Builds on bench/multitenant.py (its dataflows, load generator, `summarize` and
`calibrate_capacity`); this module adds a runner for any set of dataflows, each
with its own load (steady, spiky or started late), and per-second series.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from bench.multitenant import CONFIG, alerts, bulk, generate, percentile, summarize
from cameo_actors import Dataflow, count

NUM_EXECUTORS = 2
#: mode -> RuntimeConfig keywords. The fair scenario maps its "cameo" slot to fair_share.
MODES = {
    "fifo": dict(policy="fifo", isolation="shared"),
    "cameo": dict(policy="cameo", isolation="shared"),
    "isolated": dict(policy="fifo", isolation="isolated"),
}
FAIR_MODES = {
    "fifo": dict(policy="fifo", isolation="shared"),
    "cameo": dict(policy="fair_share", isolation="shared"),
}
RATIO_NOTE = "p99 of the latency-sensitive dataflows: the max over them (one in single, multi, spike)"


@dataclass
class Load:
    """One dataflow and the load offered to it."""

    flow: Dataflow
    rate: float  # events/s
    period_s: float  # a batch every period_s
    keys: int
    latency_sensitive: bool = False
    start_s: float = 0.0  # start pushing this long after the run starts
    spike_factor: float = 1.0  # rate multiplier during spikes (1 = no spikes)
    spike_every_s: float = 5.0
    spike_s: float = 2.0
    spikes: list[tuple[float, float]] = field(default_factory=list)  # wall ms, filled while running

    @property
    def name(self) -> str:
        return self.flow.spec.name

    @property
    def target_ms(self) -> float:
        return float(self.flow.spec.latency_target_ms)


class _Until:
    """A stop event that is also set once a deadline has passed (for one load segment)."""

    def __init__(self, stop: threading.Event, deadline: float) -> None:
        self.stop, self.deadline = stop, deadline

    def is_set(self) -> bool:
        return self.stop.is_set() or time.monotonic() >= self.deadline


def _push(rt: Any, load: Load, stop: threading.Event) -> None:
    """Run `load` against `rt` until `stop`: a late start, then steady or periodic spikes."""
    if stop.wait(load.start_s):
        return
    if load.spike_factor == 1.0:
        generate(rt, load.name, load.rate, load.period_s, stop, load.keys)
        return
    while not stop.is_set():  # normal, then spike, then normal ...
        for factor, seconds in ((1.0, load.spike_every_s - load.spike_s), (load.spike_factor, load.spike_s)):
            if stop.is_set():
                return
            t0 = time.time() * 1000
            generate(rt, load.name, load.rate * factor, load.period_s,
                     _Until(stop, time.monotonic() + seconds), load.keys)  # type: ignore[arg-type]
            if factor != 1.0:
                load.spikes.append((t0, time.time() * 1000))


def _series(rows: list[tuple[dict[str, Any], float, float]], since_ms: float, seconds: float) -> list[float | None]:
    """p99 latency (ms) of the results ingested in each 1 s bucket after `since_ms`."""
    buckets: list[list[float]] = [[] for _ in range(max(1, int(seconds + 0.999)))]
    for _, ing, eg in rows:
        i = int((ing - since_ms) // 1000)
        if 0 <= i < len(buckets):
            buckets[i].append(eg - ing)
    return [percentile(b, 0.99) if b else None for b in buckets]


def run(loads: list[Load], mode: str, config: dict[str, Any], warmup: float, seconds: float,
        sample_s: float | None = None) -> dict[str, Any]:
    """Deploy `loads` on a fresh pool, push for warmup + seconds, and summarize the measured part.

    Latency counts results ingested after the warm-up; throughput_eps is events
    ingested per second over the measured part; utilization is the executors'
    mean busy share over it. With `sample_s`, also samples events ingested per
    dataflow every `sample_s` seconds from the start ("throughput_series_eps").
    """
    from cameo_actors.runtime import Runtime, RuntimeConfig

    pool = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    per_df = max(1, NUM_EXECUTORS // len(loads)) if config.get("isolation") == "isolated" else 1
    rt = Runtime.start(RuntimeConfig(num_executors=NUM_EXECUTORS, executors_per_dataflow=per_df,
                                     **CONFIG, **config), pool=pool)
    feeders = [Runtime.connect(pool=pool, address=None) for _ in loads]
    try:
        for ld in loads:
            rt.deploy(ld.flow)
        stop = threading.Event()
        threads = [threading.Thread(target=_push, args=(f, ld, stop), daemon=True)
                   for f, ld in zip(feeders, loads, strict=True)]
        start_ms = time.time() * 1000
        for t in threads:
            t.start()
        samples: list[list[int]] = []
        sampler = None
        if sample_s:
            def sample() -> None:
                nxt = time.monotonic()
                while not stop.is_set():
                    samples.append([rt.stats(ld.name)["events_in"] for ld in loads])
                    nxt += sample_s
                    stop.wait(max(0.0, nxt - time.monotonic()))
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        time.sleep(warmup)
        since_ms = time.time() * 1000
        busy0 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        in0 = {ld.name: rt.stats(ld.name)["events_in"] for ld in loads}
        time.sleep(seconds)
        busy1 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        in1 = {ld.name: rt.stats(ld.name)["events_in"] for ld in loads}
        wall_ms = time.time() * 1000 - since_ms
        stop.set()
        for t in threads:
            t.join()
        if sampler:
            sampler.join()
        for ld in loads:
            rt.close(ld.name)
        rt.wait_idle(timeout_s=120)
        out: dict[str, Any] = {"policy": config["policy"], "isolation": config["isolation"],
                               "dataflows": {}}
        for ld in loads:
            rows = rt.result_rows(ld.name)
            s = summarize(rows, since_ms, ld.target_ms, seconds)
            lat = sorted(eg - ing for _, ing, eg in rows if ing >= since_ms)
            s.update(throughput_eps=(in1[ld.name] - in0[ld.name]) / (wall_ms / 1000),
                     target_ms=ld.target_ms, latency_sensitive=ld.latency_sensitive,
                     offered_eps=ld.rate,
                     cdf_ms=[percentile(lat, q / 100) for q in range(101)] if lat else [])
            if ld.spike_factor != 1.0 or ld.latency_sensitive and any(x.spike_factor != 1.0 for x in loads):
                s["p99_series_ms"] = _series(rows, since_ms, seconds)
            if ld.spikes:
                s["spikes_s"] = [[round((a - since_ms) / 1000, 2), round((b - since_ms) / 1000, 2)]
                                 for a, b in ld.spikes if b > since_ms]
            out["dataflows"][ld.name] = s
        out["utilization"] = statistics.mean((busy1[e] - busy0[e]) / wall_ms for e in busy1)
        if samples:
            out["sample_s"] = sample_s
            out["sample_offset_s"] = round((since_ms - start_ms) / 1000, 2) if warmup else 0.0
            for j, ld in enumerate(loads):
                out["dataflows"][ld.name]["throughput_series_eps"] = [
                    (b[j] - a[j]) / sample_s for a, b in zip(samples, samples[1:], strict=False)]
        return out
    finally:
        rt.shutdown(stop_ray=False)


def ratios(modes: dict[str, Any]) -> dict[str, float | None]:
    """fifo/cameo and isolated/cameo p99 of the latency-sensitive dataflows (max over them)."""
    def p99(mode: str) -> float | None:
        dfs = modes.get(mode, {}).get("dataflows", {})
        vals = [d["p99_ms"] for d in dfs.values() if d.get("latency_sensitive") and "p99_ms" in d]
        return max(vals) if vals else None

    cam = p99("cameo")
    out: dict[str, float | None] = {}
    for other in ("fifo", "isolated"):
        o = p99(other)
        out[f"{other}_over_cameo_p99"] = o / cam if o is not None and cam else None
    return out


def _scenario(loads_for_mode: Any, modes: dict[str, dict[str, Any]], warmup: float, seconds: float,
              sample_s: float | None = None, log: Any = print) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for mode, cfg in modes.items():
        r = res[mode] = run(loads_for_mode(), mode, cfg, warmup, seconds, sample_s)
        parts = [f"{n} p99 {d.get('p99_ms', float('nan')):7.1f} ms {d.get('within_target', 0):6.1%} in target "
                 f"{d['throughput_eps']:8,.0f} ev/s" for n, d in r["dataflows"].items()]
        log(f"  {mode:9s} ({cfg['policy']}) " + " | ".join(parts) + f" | busy {r['utilization']:.0%}")
    res["ratios"] = ratios(res)
    res["ratios_over"] = RATIO_NOTE
    return res


# -- the scenarios ---------------------------------------------------------------------------------
def single(capacity: float, warmup: float, seconds: float, load: float = 0.85, log: Any = print) -> dict[str, Any]:
    """bulk alone (source -> burn map -> key_by -> 1 s tumbling count, parallelism 2) at `load` of capacity."""
    def loads() -> list[Load]:
        return [Load(bulk(), load * capacity, 0.1, 200, latency_sensitive=True)]
    return _scenario(loads, MODES, warmup, seconds, log=log)


def multi(capacity: float, warmup: float, seconds: float, load: float = 0.85, log: Any = print) -> dict[str, Any]:
    """bench/multitenant.py's setup: alerts (1,000 ev/s, 50 ms) + bulk at `load` of capacity."""
    def loads() -> list[Load]:
        return [Load(alerts(), 1000, 0.01, 10, latency_sensitive=True),
                Load(bulk(), load * capacity, 0.1, 200)]
    return _scenario(loads, MODES, warmup, seconds, log=log)


def spike(capacity: float, warmup: float, seconds: float, load: float = 0.85, factor: float = 5.0,
          every_s: float = 5.0, spike_s: float = 2.0, log: Any = print) -> dict[str, Any]:
    """multi, with bulk offered `factor` x its rate for `spike_s` seconds every `every_s` seconds."""
    def loads() -> list[Load]:
        return [Load(alerts(), 1000, 0.01, 10, latency_sensitive=True),
                Load(bulk(), load * capacity, 0.1, 200, spike_factor=factor, spike_every_s=every_s,
                     spike_s=spike_s)]
    res = _scenario(loads, MODES, warmup, seconds, log=log)
    res["spike"] = {"factor": factor, "every_s": every_s, "spike_s": spike_s}
    return res


def tenant_bulk(name: str, tenant: str, weight: float) -> Dataflow:
    """The bulk dataflow of bench/multitenant.py under another name, tenant and weight."""
    return (Dataflow(name, latency_target_ms=1000, tenant=tenant, weight=weight)
            .source("s", schema={"ts": "int", "key": "str", "value": "float"}, event_time="ts", parallelism=2)
            .map(function="bench.work:burn", parallelism=2)
            .key_by("key").window(tumbling_ms=1000, parallelism=2).aggregate(n=count())
            .sink("o"))


def fair(capacity: float, seconds: float, stagger_s: float = 3.0, weights: tuple[float, ...] = (1, 1, 2),
         offered: float = 1.0, log: Any = print) -> dict[str, Any]:
    """Three bulk tenants a, b, c (weights 1, 1, 2), started `stagger_s` apart, each offered
    `offered` x capacity; fifo vs fair_share. Runs 2 x stagger_s + `seconds` (all three
    active for the last `seconds`), measured from the start; final shares over the last part."""
    names = ("a", "b", "c")

    def loads() -> list[Load]:
        return [Load(tenant_bulk(f"bulk-{t}", t, w), offered * capacity, 0.1, 200, start_s=i * stagger_s)
                for i, (t, w) in enumerate(zip(names, weights, strict=True))]
    total = 2 * stagger_s + seconds
    res = _scenario(loads, FAIR_MODES, 0.0, total, sample_s=1.0, log=log)
    for mode in FAIR_MODES:
        dfs = res[mode]["dataflows"]
        tail = max(1, int(seconds) - 1)  # whole seconds with all three pushing
        sums = {n: sum(d["throughput_series_eps"][-tail:]) for n, d in dfs.items()}
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
