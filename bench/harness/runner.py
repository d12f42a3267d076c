"""A runner for any set of dataflows, each with its own workload (started late if asked):
deploy them on a fresh pool, play the workloads in real time, and measure the part after
the warm-up (latency, throughput, utilization, and per-second series if asked)."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from bench.harness.cpu import CpuMeter
from bench.harness.stats import quantile, summarize
from bench.harness.tenants import CONFIG
from bench.harness.workload import Workload
from cameo_actors import Dataflow
from cameo_actors.operators.column_schema import arrow_schema

#: Executors of every pool the runner starts (shared, or split between the dataflows).
NUM_EXECUTORS = 2


@dataclass
class Load:
    """One dataflow and the workload offered to it (played in real time)."""

    flow: Dataflow
    workload: Workload
    latency_sensitive: bool = False
    start_s: float = 0.0  # start pushing this long after the run starts
    #: A dataflow of several sources gets each batch split evenly over them, and source
    #: i's event times lag i x skew_ms behind the wall clock: inputs whose event time
    #: progresses apart, as a topic's partitions read at different lags.
    skew_ms: float = 0.0
    started_ms: list[float] = field(default_factory=list)  # wall ms the workload started, when running

    # The builder's own fields: its `spec` validates the whole dataflow each time it is
    # read, and a feeder that named its dataflow that way spent a third of its time there.
    @property
    def name(self) -> str:
        return self.flow.name

    @property
    def target_ms(self) -> float:
        return float(self.flow.latency_target_ms)


#: How the feeders push: rows (lists of dicts), or the same events as Arrow tables; each
#: batch as one call (to one source instance in turn), or spread over the source's
#: instances, a call each.
FEED = {"columns": False, "spread": False}


def play(rt: Any, load: Load, stop: threading.Event) -> None:
    """Play `load.workload` into `rt` until `stop`, after a late start if asked; over the
    dataflow's sources, `load.skew_ms` apart in event time."""
    if stop.wait(load.start_s):
        return
    load.started_ms.append(time.time() * 1000)
    columns = FEED["columns"]
    sources = load.flow.spec.sources
    schema = arrow_schema(sources[0].schema)
    spread = FEED["spread"]

    def send(source: Any, events: list[dict[str, Any]]) -> None:
        data: Any = pa.Table.from_pylist(events, schema=schema) if columns else events
        calls = source.parallelism if spread else 1  # `push` sends them round robin
        rt.push(load.name, source.id, data, batch_size=-(-len(events) // calls))

    def push(events: list[dict[str, Any]]) -> None:
        if len(sources) == 1:
            send(sources[0], events)
            return
        share = -(-len(events) // len(sources))
        for i, source in enumerate(sources):
            part = events[i * share:(i + 1) * share]
            lag = int(i * load.skew_ms)
            if part:
                send(source, [{**e, "ts": e["ts"] - lag} for e in part] if lag else part)
    load.workload.play(push, stop)


def _series(rows: list[tuple[dict[str, Any], float, float]], since_ms: float, seconds: float) -> list[float | None]:
    """p99 latency (ms) of the results ingested in each 1 s bucket after `since_ms`."""
    buckets: list[list[float]] = [[] for _ in range(max(1, int(seconds + 0.999)))]
    for _, ing, eg in rows:
        i = int((ing - since_ms) // 1000)
        if 0 <= i < len(buckets):
            buckets[i].append(eg - ing)
    return [quantile(b, 0.99) for b in buckets]


def _from_event_time(rows: list[tuple[dict[str, Any], float, float]], since_ms: float,
                     target_ms: float) -> dict[str, Any]:
    """p50/p99 and share within target of egress - event time, over results ingested after
    since_ms; a window's result counts from its window_end (when it could first be due)."""
    lat = sorted(eg - r.get("window_end", r.get("ts", eg)) for r, ing, eg in rows if ing >= since_ms)
    if not lat:
        return {}
    return {"p50_from_event_ms": quantile(lat, 0.5), "p99_from_event_ms": quantile(lat, 0.99),
            "within_target_from_event": sum(1 for x in lat if x <= target_ms) / len(lat)}


def run(loads: list[Load], mode: str, config: dict[str, Any], warmup: float, seconds: float,
        sample_s: float | None = None, explain: bool = False) -> dict[str, Any]:
    """Deploy `loads` on a fresh pool, push for warmup + seconds, and summarize the measured part.

    Latency counts results ingested after the warm-up: from the ingest of the
    message that made the result computable to egress (the Cameo paper's
    measure), and `*_from_event_ms` from the event time of the result (an
    event's `ts`, which the workload sets to when it was due to be sent; a
    window's end) to egress, which also counts time the feeder was held back
    by backpressure. throughput_eps is events ingested per second over the
    measured part; utilization is the executors' mean busy share over it; "cpu" the
    CPU seconds of every process of the run over it, by role (`CpuMeter.summary`).
    With `sample_s`, also samples each dataflow every `sample_s` seconds from
    the start: events ingested per second ("throughput_series_eps") and the
    executor time its operators took ("busy_series_ms"). With `explain`, each
    latency-sensitive dataflow's late results' critical path over the measured part,
    in words ("late_words", from `Runtime.explain`). Each dataflow's "executors" are
    where the pool placed it.
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
        placed = {ld.name: sorted(set(rt.describe(ld.name)["executors"])) for ld in loads}
        stop = threading.Event()
        threads = [threading.Thread(target=play, args=(f, ld, stop), daemon=True)
                   for f, ld in zip(feeders, loads, strict=True)]
        start_ms = time.time() * 1000
        for t in threads:
            t.start()
        samples: list[list[tuple[int, float]]] = []  # per sample: (events in, busy ms) per load
        sampler = None
        if sample_s:
            def sample() -> None:
                nxt = time.monotonic()
                while not stop.is_set():
                    stats = [rt.stats(ld.name) for ld in loads]
                    samples.append([(st["events_in"], st["busy_ms"]) for st in stats])
                    nxt += sample_s
                    stop.wait(max(0.0, nxt - time.monotonic()))
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        time.sleep(warmup)
        since_ms = time.time() * 1000
        busy0 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        in0 = {ld.name: rt.stats(ld.name)["events_in"] for ld in loads}
        with CpuMeter() as machine:
            time.sleep(seconds)
        busy1 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        in1 = {ld.name: rt.stats(ld.name)["events_in"] for ld in loads}
        wall_ms = time.time() * 1000 - since_ms
        explained = {ld.name: rt.explain(ld.name, last_s=seconds) for ld in loads
                     if explain and ld.latency_sensitive}
        stop.set()
        for t in threads:
            t.join()
        if sampler:
            sampler.join()
        for ld in loads:
            rt.close(ld.name)
        rt.wait_idle(timeout_s=120)
        out: dict[str, Any] = {"policy": config["policy"], "isolation": config["isolation"],
                               "tenant_floor": config.get("tenant_floor", True), "dataflows": {}}
        for ld in loads:
            rows = rt.result_rows(ld.name)
            s = summarize(rows, since_ms, ld.target_ms)
            lat = sorted(eg - ing for _, ing, eg in rows if ing >= since_ms)
            s.update(throughput_eps=(in1[ld.name] - in0[ld.name]) / (wall_ms / 1000),
                     target_ms=ld.target_ms, latency_sensitive=ld.latency_sensitive,
                     executors=placed[ld.name],
                     offered_eps=ld.workload.rate_eps,
                     cdf_ms=[quantile(lat, q / 100) for q in range(101)] if lat else [])
            s.update(_from_event_time(rows, since_ms, ld.target_ms))
            if ld.name in explained:
                e = explained[ld.name]
                s.update(late_paths=e.get("late_paths", 0), late_words=e.get("late_words", [])[:4])
            if any(x.workload.profile == "bursty" for x in loads):
                s["p99_series_ms"] = _series(rows, since_ms, seconds)
            if ld.workload.bursts() and ld.started_ms:
                at = (ld.started_ms[0] - since_ms) / 1000
                s["spikes_s"] = [[round(at + a, 2), round(at + b, 2)] for a, b in ld.workload.bursts()
                                 if at + b > 0 and at + a < seconds]
            out["dataflows"][ld.name] = s
        out["utilization"] = statistics.mean((busy1[e] - busy0[e]) / wall_ms for e in busy1)
        # Every process's CPU (the feeders in the driver too: on this machine they share
        # the cores with the executors), and the events taken in per CPU second of them all.
        out["cpu"] = machine.summary(sum(in1[n] - in0[n] for n in in1))
        if samples:
            out["sample_s"] = sample_s
            out["sample_offset_s"] = round((since_ms - start_ms) / 1000, 2) if warmup else 0.0
            pairs = list(zip(samples, samples[1:], strict=False))
            for j, ld in enumerate(loads):
                d = out["dataflows"][ld.name]
                d["throughput_series_eps"] = [(b[j][0] - a[j][0]) / sample_s for a, b in pairs]
                d["busy_series_ms"] = [b[j][1] - a[j][1] for a, b in pairs]
        return out
    finally:
        rt.shutdown(stop_ray=False)
