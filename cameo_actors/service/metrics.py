"""Prometheus metrics, pulled from every executor on every node at scrape time.

The service process holds no counters of its own: at each scrape it asks the
runtime for a snapshot (one parallel round of Ray calls: the controller's
registry, each executor's per-dataflow counters and histogram buckets, each
executor's scheduler counters) and turns it into metric families. So the
numbers are current and cover the whole cluster, not only this process.

Labels stay low-cardinality: `dataflow`, `tenant`, and for errors `step` and
`kind`; executors are labelled by index and a short node id. The scaling
controller's status (`Runtime.scaling()`, one more call per scrape) adds each
step's parallelism, lessees, true rate and busy share, labelled `dataflow` and
`step` (never an instance).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import (
    LATENCY_BUCKETS_MS,
    ExecutorStats,
    MigrationInfo,
    PoolSnapshot,
)
from cameo_actors.service.scaling import DecisionCounter

log = logging.getLogger("cameo.service")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DF_LABELS = ["dataflow", "tenant"]
EX_LABELS = ["executor", "node"]


def _le(ms: float) -> str:
    return f"{ms / 1000.0:g}"


def histogram_buckets(counts: list[int]) -> list[tuple[str, float]]:
    """Non-cumulative counts per LATENCY_BUCKETS_MS bucket (+ overflow) -> Prometheus's
    cumulative (le, count) pairs in seconds, ending with +Inf.

    >>> histogram_buckets([1, 0, 2] + [0] * 10 + [3])[:3]
    [('0.001', 1), ('0.002', 1), ('0.005', 3)]
    """
    if len(counts) != len(LATENCY_BUCKETS_MS) + 1:
        raise ValueError(f"latency buckets: expected {len(LATENCY_BUCKETS_MS) + 1} counts, "
                         f"got {len(counts)}")
    out: list[tuple[str, float]] = []
    total = 0
    for bound, n in zip(LATENCY_BUCKETS_MS, counts, strict=False):
        total += n
        out.append((_le(bound), total))
    out.append(("+Inf", total + counts[-1]))
    return out


def short_node(node_id: str | None) -> str:
    return (node_id or "unknown")[:12]


def families(snapshot: PoolSnapshot, *, tenant: str | None = None,
             include_executors: bool = True, scrape_seconds: float | None = None) -> list[Metric]:
    """Metric families of a runtime snapshot (`PoolSnapshot`, from `Runtime.stats_all`).

    Args:
        snapshot: {"dataflows": [...], "executors": [...]}.
        tenant: only this tenant's dataflows (a tenant token scrapes); None = all.
        include_executors: add the per-executor families (admin scrapes).
        scrape_seconds: how long fetching the snapshot took, exported as a gauge.
    """
    lat = HistogramMetricFamily("cameo_result_latency_seconds",
                                "End-to-end latency of results: egress time minus ingest time of "
                                "the message that made them computable", labels=DF_LABELS)
    results = CounterMetricFamily("cameo_results", "Results that reached a sink", labels=DF_LABELS)
    within = CounterMetricFamily("cameo_results_within_target",
                                 "Results that reached a sink within the latency target",
                                 labels=DF_LABELS)
    target = GaugeMetricFamily("cameo_latency_target_seconds", "The dataflow's latency target",
                               labels=DF_LABELS)
    weight = GaugeMetricFamily("cameo_tenant_weight", "The dataflow's share under fair_share",
                               labels=DF_LABELS)
    recent = GaugeMetricFamily("cameo_result_latency_recent_seconds",
                               "Latency quantiles of the most recent results (up to 20000 per "
                               "executor)", labels=[*DF_LABELS, "quantile"])
    ev_in = CounterMetricFamily("cameo_events_in", "Events that entered the dataflow's sources",
                                labels=DF_LABELS)
    ev_out = CounterMetricFamily("cameo_events_out", "Events that left through the sinks",
                                 labels=DF_LABELS)
    errors = CounterMetricFamily("cameo_errors", "Records sent to the error output",
                                 labels=[*DF_LABELS, "step", "kind"])
    backlog = GaugeMetricFamily("cameo_backlog_messages", "Messages queued for the dataflow's "
                                "operators, all executors", labels=DF_LABELS)
    running = GaugeMetricFamily("cameo_dataflows", "Dataflows running", labels=["tenant"])
    checkpoints = CounterMetricFamily("cameo_checkpoints", "Checkpoints of the dataflow, by "
                                      "outcome (failed: not complete in time, or a part not "
                                      "written; the previous one stays in use)",
                                      labels=[*DF_LABELS, "outcome"])
    ckpt_seconds = GaugeMetricFamily("cameo_checkpoint_duration_seconds", "How long the last "
                                     "completed checkpoint took, barriers to manifest",
                                     labels=DF_LABELS)
    ckpt_bytes = GaugeMetricFamily("cameo_checkpoint_size_bytes", "Size of the last completed "
                                   "checkpoint", labels=DF_LABELS)
    ckpt_age = GaugeMetricFamily("cameo_checkpoint_age_seconds", "Time since the last completed "
                                 "checkpoint: what a recovery would replay", labels=DF_LABELS)
    recoveries = CounterMetricFamily("cameo_recoveries", "Times the dataflow was restored from a "
                                     "checkpoint after an executor it ran on died",
                                     labels=DF_LABELS)
    lag = GaugeMetricFamily("cameo_kafka_lag_records", "Records of a Kafka partition not read "
                            "yet by the source instance that reads it",
                            labels=[*DF_LABELS, "instance", "partition"])
    written = CounterMetricFamily("cameo_kafka_written_records", "Result rows a Kafka sink "
                                  "instance wrote in committed transactions since it started "
                                  "on its executor", labels=[*DF_LABELS, "instance"])
    failures = CounterMetricFamily("cameo_kafka_failures", "Reads or writes of a Kafka reader "
                                   "or writer that failed (the broker away, a topic missing, "
                                   "a produce or a transaction refused), each tried again "
                                   "after a backoff, since it started on its executor",
                                   labels=[*DF_LABELS, "instance"])
    waiting = GaugeMetricFamily("cameo_kafka_waiting", "1 while a Kafka reader or writer waits "
                                "for its broker (down, or a topic missing)",
                                labels=[*DF_LABELS, "instance"])
    now = time.time()
    per_tenant: dict[str, int] = {}
    for d in snapshot.get("dataflows", []):
        if tenant is not None and d["tenant"] != tenant:
            continue
        labels = [d["name"], d["tenant"]]
        per_tenant[d["tenant"]] = per_tenant.get(d["tenant"], 0) + 1
        lat.add_metric(labels, buckets=histogram_buckets(d["buckets"]),
                       sum_value=d["sum_ms"] / 1000.0)
        results.add_metric(labels, d["results"])
        within.add_metric(labels, d["within_target_count"])
        target.add_metric(labels, d["target_ms"] / 1000.0)
        weight.add_metric(labels, d["weight"])
        for v, quantile in ((d["p50_ms"], "0.5"), (d["p95_ms"], "0.95"), (d["p99_ms"], "0.99")):
            if v is not None:
                recent.add_metric([*labels, quantile], v / 1000.0)
        ev_in.add_metric(labels, d["events_in"])
        ev_out.add_metric(labels, d["events_out"])
        backlog.add_metric(labels, d["backlog"])
        for key, n in sorted(d["errors"].items()):
            step, _, kind = key.rpartition(":")
            errors.add_metric([*labels, step, kind], n)
        ckpt = d.get("checkpoints")
        if ckpt:
            checkpoints.add_metric([*labels, "completed"], ckpt["completed"])
            checkpoints.add_metric([*labels, "failed"], ckpt["failed"])
            if ckpt["last_at"] is not None:
                ckpt_seconds.add_metric(labels, ckpt["last_duration_s"] or 0.0)
                ckpt_bytes.add_metric(labels, ckpt["last_bytes"])
                ckpt_age.add_metric(labels, max(0.0, now - ckpt["last_at"]))
        recoveries.add_metric(labels, d.get("recoveries", 0))
        for instance, c in sorted(d.get("connectors", {}).items()):
            waiting.add_metric([*labels, instance], float(c["state"] == "waiting for the broker"))
            failures.add_metric([*labels, instance], c.get("failures", 0))
            for partition, p in sorted(c.get("partitions", {}).items()):
                lag.add_metric([*labels, instance, partition], p["lag"])
            if "written" in c:
                written.add_metric([*labels, instance], c["written"])
    for t, n in sorted(per_tenant.items()):
        running.add_metric([t], n)
    transitions = CounterMetricFamily("cameo_dataflow_transitions", "Dataflows that entered a "
                                      "lifecycle state (running, finishing, finished, "
                                      "cancelled, failed, recovering) since the pool started",
                                      labels=["tenant", "state"])
    for t, state, n in snapshot.get("transitions", []):
        if tenant is None or t == tenant:
            transitions.add_metric([t, state], n)
    out: list[Metric] = [lat, results, within, target, weight, recent, ev_in, ev_out, errors,
                         backlog, running, transitions, checkpoints, ckpt_seconds, ckpt_bytes,
                         ckpt_age, recoveries, lag, written, waiting, failures]
    migrations = snapshot.get("migrations", [])
    if tenant is not None:  # MigrationInfo names the dataflow, not its tenant
        own = {d["name"] for d in snapshot.get("dataflows", []) if d["tenant"] == tenant}
        migrations = [m for m in migrations if m["dataflow"] in own]
    out.extend(migration_families(migrations))
    out.extend(overload_families(snapshot.get("overload"), tenant))
    mine = None if tenant is None else {d["name"] for d in snapshot.get("dataflows", [])
                                        if d["tenant"] == tenant}
    out.extend(critical_families(snapshot.get("critical_path"), mine, include_executors))
    if tenant is None:
        states = GaugeMetricFamily("cameo_dataflows_by_state", "Dataflows the pool keeps, by "
                                   "lifecycle state (ended ones for a while)", labels=["state"])
        for state, n in sorted(snapshot.get("states", {}).items()):
            states.add_metric([state], n)
        out.append(states)
    if include_executors:
        out.extend(executor_families(snapshot.get("executors", [])))
    if scrape_seconds is not None:
        out.append(GaugeMetricFamily("cameo_scrape_duration_seconds",
                                     "Time the service took to pull this snapshot from the "
                                     "executors", value=scrape_seconds))
    return out


def overload_families(report: dict[str, Any] | None, tenant: str | None) -> list[Metric]:
    """The overload report (`Runtime.predict()`) as gauges; a tenant sees its own dataflows
    and not the other tenants' loads."""
    missing = GaugeMetricFamily("cameo_dataflow_missing_target", "1 while the dataflow is "
                                "predicted or measured to miss its target (the overload "
                                "report), else 0", labels=DF_LABELS)
    behind = GaugeMetricFamily("cameo_dataflow_behind_seconds_per_second", "How much later its "
                               "results get every second, for lack of executor time",
                               labels=DF_LABELS)
    demand = GaugeMetricFamily("cameo_dataflow_demand_executor_seconds_per_second",
                               "Executor time it needs per second at its measured rate",
                               labels=DF_LABELS)
    given = GaugeMetricFamily("cameo_dataflow_allocation_executor_seconds_per_second",
                              "Executor time it is predicted to get per second (its tenant's "
                              "floor and what is spare)", labels=DF_LABELS)
    out: list[Metric] = [missing, behind, demand, given]
    if report is None:
        return out
    for o in report["outcomes"]:
        if tenant is not None and o["tenant"] != tenant:
            continue
        labels = [o["name"], o["tenant"]]
        missing.add_metric(labels, 1.0 if o["verdict"] == "misses" else 0.0)
        behind.add_metric(labels, o["behind_s_per_s"])
        if o["demand_ms_per_s"] is not None:
            demand.add_metric(labels, o["demand_ms_per_s"] / 1000.0)
        if o["allocation_ms_per_s"] is not None:
            given.add_metric(labels, o["allocation_ms_per_s"] / 1000.0)
    if tenant is None:
        over = GaugeMetricFamily("cameo_tenant_over_share_executor_seconds_per_second",
                                 "Executor time per second a tenant asks above its weighted "
                                 "share of the pool (the load that causes an overload)",
                                 labels=["tenant"])
        for c in report["causes"]:
            over.add_metric([c["tenant"]], c["over_share_ms_per_s"] / 1000.0)
        utilization = GaugeMetricFamily("cameo_pool_demand_utilization", "Known demand over "
                                        "the pool's executor time (above 1: overloaded)")
        if report.get("utilization") is not None:
            utilization.add_metric([], report["utilization"])
        out += [over, utilization]
    return out


def critical_families(critical: dict[str, Any] | None, own: set[str] | None,
                      include_executors: bool) -> list[Metric]:
    """The latest pool-wide critical-path snapshot: each operator's, and (admin) each
    executor's, share of the pool's critical path. A tenant (`own`: its dataflows' names)
    sees its own operators only.

    >>> [m.samples[0].labels for m in critical_families(
    ...     {"by_operator": {"alerts/map_1": 0.4}}, None, False)]
    [{'dataflow': 'alerts', 'step': 'map_1'}]
    """
    operators = GaugeMetricFamily("cameo_critical_participation", "The operator's share of "
                                  "the pool's critical path in the latest snapshot (0..1)",
                                  labels=["dataflow", "step"])
    out: list[Metric] = [operators]
    critical = critical or {}
    for key, share in sorted((critical.get("by_operator") or {}).items()):
        dataflow, _, step = str(key).partition("/")  # names hold no "/" (the spec's rule)
        if own is None or dataflow in own:
            operators.add_metric([dataflow, step], float(share))
    if include_executors:
        executors = GaugeMetricFamily("cameo_executor_critical_participation", "The "
                                      "executor's share of the pool's critical path in the "
                                      "latest snapshot (0..1)", labels=["executor"])
        for index, share in sorted((critical.get("by_executor") or {}).items()):
            executors.add_metric([str(index)], float(share))
        out.append(executors)
    return out


def migration_families(migrations: list[MigrationInfo]) -> list[Metric]:
    """Live reconfiguration: migrations under way, bins and bytes moved (summed over the
    migrations the controller keeps), and how long the last finished one of each step took."""
    in_progress = GaugeMetricFamily("cameo_migrations_in_progress", "Reconfigurations (scale, "
                                    "migrate, executor drain) under way",
                                    value=sum(m["state"] == "running" for m in migrations))
    labels = ["dataflow", "step"]
    bins = CounterMetricFamily("cameo_migration_bins_moved", "Key bins moved between instances "
                               "by reconfigurations (those the pool keeps)", labels=labels)
    moved = CounterMetricFamily("cameo_migration_bytes_moved", "Operator state moved between "
                                "instances by reconfigurations (those the pool keeps)",
                                labels=labels)
    duration = GaugeMetricFamily("cameo_migration_duration_seconds", "How long the last "
                                 "finished reconfiguration of the step took",
                                 labels=[*labels, "strategy"])
    totals: dict[tuple[str, str], list[int]] = {}
    last: dict[tuple[str, str, str], MigrationInfo] = {}
    for m in migrations:
        sums = totals.setdefault((m["dataflow"], m["step"]), [0, 0])
        sums[0] += m.get("bins_moved", 0)
        sums[1] += m.get("bytes_moved", 0)
        if m["state"] == "done":
            key = (m["dataflow"], m["step"], m.get("strategy", ""))
            if key not in last or (m.get("ended_at") or 0.0) >= (last[key].get("ended_at") or 0.0):
                last[key] = m
    for step, (n_bins, n_bytes) in sorted(totals.items()):
        bins.add_metric(list(step), n_bins)
        moved.add_metric(list(step), n_bytes)
    for with_strategy, m in sorted(last.items()):
        duration.add_metric(list(with_strategy), m.get("duration_s", 0.0))
    return [in_progress, bins, moved, duration]


def scaling_families(status: dict[str, Any] | None, own: set[str] | None,
                     decisions: dict[str, int] | None = None) -> list[Metric]:
    """The scaling controller's status (`Runtime.scaling()`) as gauges per step, and the
    decisions counted so far (`DecisionCounter`). A tenant (`own`: its dataflows' names)
    sees its own dataflows, and not the pool's executors.

    >>> fams = scaling_families({"wanted_executors": 3, "dataflows": {"a": {"steps": {
    ...     "w": {"parallelism": 2, "lessees": 0, "true_processing_eps": 900.0,
    ...           "busy": 0.5}}}}, "misses": []}, None, {"a": 4})
    >>> [(m.name, m.samples[0].value) for m in fams if m.samples][:3]
    [('cameo_step_parallelism', 2.0), ('cameo_step_lessees', 0.0), ('cameo_step_true_processing_eps', 900.0)]
    """
    labels = ["dataflow", "step"]
    parallelism = GaugeMetricFamily("cameo_step_parallelism", "Instances of the step now",
                                    labels=labels)
    lessees = GaugeMetricFamily("cameo_step_lessees", "Lessee instances helping the step's hot "
                                "keys now", labels=labels)
    true_rate = GaugeMetricFamily("cameo_step_true_processing_eps", "Events one instance of "
                                  "the step processes per second of useful time (DS2's true "
                                  "processing rate), over the scaling window", labels=labels)
    busy = GaugeMetricFamily("cameo_step_busy_ratio", "Mean share of time the step's instances "
                             "spend on useful work (0..1), over the scaling window",
                             labels=labels)
    counted = CounterMetricFamily("cameo_scaling_decisions", "Scaling decisions (parallelism or "
                                  "lessees changes asked for) seen by this service process",
                                  labels=["dataflow"])
    misses = GaugeMetricFamily("cameo_scaling_misses", "1 while the scaling controller finds "
                               "that the pool cannot meet the dataflow's target even at its "
                               "maximum, else 0", labels=["dataflow"])
    out: list[Metric] = [parallelism, lessees, true_rate, busy, counted, misses]
    status = status or {}
    flows = {n: d for n, d in sorted((status.get("dataflows") or {}).items())
             if own is None or n in own}
    for name, flow in flows.items():
        for step, st in sorted((flow.get("steps") or {}).items()):
            for family, value in ((parallelism, st.get("parallelism")),
                                  (lessees, st.get("lessees")),
                                  (true_rate, st.get("true_processing_eps")),
                                  (busy, st.get("busy"))):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    family.add_metric([name, step], float(value))
    for name, n in sorted((decisions or {}).items()):
        if own is None or name in own:
            counted.add_metric([name], n)
    missing = {str(m.get("dataflow")) for m in status.get("misses") or []}
    for name in sorted(set(flows) | {n for n in missing if own is None or n in own}):
        misses.add_metric([name], 1.0 if name in missing else 0.0)
    if own is None:
        wanted = GaugeMetricFamily("cameo_pool_executors_wanted", "Executors the scaling "
                                   "controller's last plan wants")
        if status.get("wanted_executors") is not None:
            wanted.add_metric([], float(status["wanted_executors"]))
        have = GaugeMetricFamily("cameo_pool_executors", "Executors of the pool now (as the "
                                 "scaling controller counts them)")
        if status.get("executors") is not None:
            have.add_metric([], float(status["executors"]))
        out += [wanted, have]
    return out


def executor_families(executors: list[ExecutorStats]) -> list[Metric]:
    busy = CounterMetricFamily("cameo_executor_busy_seconds", "Time the executor spent running "
                               "operators; rate() of it is the busy share", labels=EX_LABELS)
    queue = GaugeMetricFamily("cameo_executor_run_queue_messages", "Messages waiting in the "
                              "executor's run queue and mailboxes", labels=EX_LABELS)
    acts = GaugeMetricFamily("cameo_executor_activations", "Operator activations hosted",
                             labels=EX_LABELS)
    executed = CounterMetricFamily("cameo_executor_messages", "Messages executed",
                                   labels=EX_LABELS)
    preempted = CounterMetricFamily("cameo_executor_preemptions", "Activations preempted by a "
                                    "more urgent one", labels=EX_LABELS)
    overdue = CounterMetricFamily("cameo_executor_overdue", "Times a waiting activation's start "
                                  "deadline passed (it then yields to work still on time)",
                                  labels=EX_LABELS)
    overhead = CounterMetricFamily("cameo_executor_scheduling_overhead_seconds",
                                   "Time spent scheduling (not running operators)",
                                   labels=EX_LABELS)
    per_msg = GaugeMetricFamily("cameo_executor_scheduling_overhead_us_per_message",
                                "Scheduling overhead per message executed, microseconds",
                                labels=EX_LABELS)
    held = GaugeMetricFamily("cameo_executor_held_activations", "Activations held by flow "
                             "control (no credits, or a full result log)", labels=EX_LABELS)
    faults = GaugeMetricFamily("cameo_executor_faults", "Recent faults of the executor's worker "
                               "loop (runtime bugs; expected 0)", labels=EX_LABELS)
    tenant_busy = CounterMetricFamily("cameo_executor_tenant_busy_seconds", "Time the executor "
                                      "spent on a tenant's work; rate() of it is the tenant's "
                                      "share", labels=[*EX_LABELS, "tenant"])
    demoted = GaugeMetricFamily("cameo_executor_tenant_demoted", "1 while the tenant is over "
                                "its weighted share on the executor and its work is demoted",
                                labels=[*EX_LABELS, "tenant"])
    demotions = CounterMetricFamily("cameo_executor_demotions", "Times a tenant went over its "
                                    "weighted share on the executor", labels=EX_LABELS)
    for e in executors:
        labels = [str(e["executor"]), short_node(e.get("node"))]
        busy.add_metric(labels, e["busy_ms"] / 1000.0)
        queue.add_metric(labels, e["backlog"])
        acts.add_metric(labels, e["activations"])
        executed.add_metric(labels, e["executed"])
        preempted.add_metric(labels, e["preempted"])
        overdue.add_metric(labels, e["overdue"])
        overhead.add_metric(labels, e["overhead_ms"] / 1000.0)
        per_msg.add_metric(labels, e["overhead_us_per_message"] or 0.0)
        held.add_metric(labels, e["held"])
        faults.add_metric(labels, len(e.get("faults", [])))
        demotions.add_metric(labels, e.get("demotions", 0))
        for t, share in sorted(e.get("tenants", {}).items()):
            tenant_busy.add_metric([*labels, t], share["busy_ms"] / 1000.0)
            demoted.add_metric([*labels, t], 1.0 if share["demoted"] else 0.0)
    return [busy, queue, acts, executed, preempted, overdue, overhead, per_msg, held, faults,
            tenant_busy, demoted, demotions]


class SnapshotCollector(Collector):
    """A prometheus-client collector over one snapshot (built per scrape)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics


def render(snapshot_fn: Callable[[], PoolSnapshot], *, tenant: str | None = None,
           include_executors: bool = True, timer: Callable[[], float] | None = None,
           scaling_fn: Callable[[], dict[str, Any]] | None = None,
           decisions: DecisionCounter | None = None) -> bytes:
    """Pull a snapshot now and render it in the Prometheus text format.

    Args:
        snapshot_fn: the runtime's snapshot (`Runtime.stats_all`).
        tenant: only this tenant's dataflows (a tenant token scrapes); None = all.
        include_executors: add the per-executor families (admin scrapes).
        timer: measures the pull (`cameo_scrape_duration_seconds`).
        scaling_fn: the scaling controller's status (`Runtime.scaling`), pulled once with
            the snapshot; when it fails the rest of the scrape still answers.
        decisions: counts the decisions across scrapes (`cameo_scaling_decisions_total`).
    """
    t0 = timer() if timer else None
    snapshot = snapshot_fn()
    scaling = None
    if scaling_fn is not None:
        try:
            scaling = scaling_fn()
        except (CameoError, TimeoutError) as e:  # RuntimeUnavailable is both
            log.warning("metrics: no scaling status this scrape: %s", e)
    took = (timer() - t0) if timer and t0 is not None else None
    metrics = families(snapshot, tenant=tenant, include_executors=include_executors,
                       scrape_seconds=took)
    if scaling is not None:
        known = {d["name"] for d in snapshot.get("dataflows", [])}
        counts = decisions.observe(scaling.get("decisions") or [], known | set(
            scaling.get("dataflows") or {})) if decisions is not None else None
        own = None if tenant is None else {d["name"] for d in snapshot.get("dataflows", [])
                                           if d["tenant"] == tenant}
        metrics += scaling_families(scaling, own, counts)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(metrics))
    return generate_latest(registry)
