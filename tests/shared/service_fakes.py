"""An in-memory service for unit tests: a fake `RuntimeAPI`, the real app over it,
and FastAPI's TestClient (no server, no Ray, no sleep)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

from cameo_actors import Dataflow
from cameo_actors.clock import FakeClock
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.dataflow.streams import stream_key
from cameo_actors.errors import ReconfigConflict, ReconfigError
from cameo_actors.operators.column_results import results_table
from cameo_actors.runtime._private.exchange.ingest import pack_ingest
from cameo_actors.runtime.boundary import LIVE_STATES, STRATEGIES, MigrationInfo, Rejected
from cameo_actors.runtime.exceptions import (
    AdmissionRefused,
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
)
from cameo_actors.runtime.interface import RuntimeAPI
from cameo_actors.scheduling.admission import Demand, predict
from cameo_actors.service.app import create_app
from cameo_actors.service.auth import TokenStore
from cameo_actors.service.client import Client
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.history import History

with warnings.catch_warnings():
    # Starlette suggests its httpx fork for TestClient; the service pins httpx itself.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ADMIN = "admin-token-for-tests"
SCHEMA = {"ts": "int", "level": "str", "key": "str"}
#: Key bins of a keyed step in the fake (the runtime's default).
BINS = 4096


class FakeLog:
    """An output log as the runtime keeps one (its egress's ResultLog): offsets count rows
    from the first ever appended; rows below the committed offset are forgotten."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, float, float]] = []
        self.committed = 0  # offset of rows[0]

    @property
    def end(self) -> int:
        return self.committed + len(self.rows)

    def read(self, start: int, end: int | None) -> list[tuple[Any, float, float]]:
        if start < self.committed:
            raise ValueError(f"offset {start} was committed already (first kept: "
                             f"{self.committed})")
        stop = self.end if end is None else min(end, self.end)
        return self.rows[start - self.committed:max(start, stop) - self.committed]

    def commit(self, offset: int) -> None:
        drop = max(0, min(offset, self.end) - self.committed)
        del self.rows[:drop]
        self.committed += drop


class FakeOutputs:
    """A dataflow's result logs (one per sink instance) and error logs (one per executor)."""

    def __init__(self, name: str, spec: dict[str, Any], executors: list[int]) -> None:
        self.results = {f"{name}/{s['id']}/{i}": FakeLog() for s in spec["steps"]
                        if s["op"] == "sink" for i in range(s.get("parallelism", 1))}
        self.errors = {f"{name}/errors/{h}": FakeLog() for h in executors}
        self.dropped = dict.fromkeys(self.errors, 0)
        self.seq = 0  # events pushed so far: the times of their results, and round robin


class FakeRuntime(RuntimeAPI):
    """A `RuntimeAPI` in memory: every event pushed becomes one 5 ms result. What it does
    not do (`scaling`) answers as a runtime without it (`_forward`: NotImplementedError)."""

    address = "fake:0"
    pool = "fake"

    def handle(self, client: str | None = None) -> FakeRuntime:
        return self  # one process: its pushes apply in order anyway

    def __init__(self) -> None:
        self.flows: dict[str, dict[str, Any]] = {}
        self.deploys = 0
        self.closed: list[str] = []
        self.reads: list[tuple[str, int, int | None]] = []  # (log, start, end) per read call
        self.error_capacity = 100_000  # unread error records kept per log, as the runtime
        self.executors = [0, 1]  # the pool's executors (add_executors / remove_executor)
        self.removed: set[int] = set()
        self.moves: dict[str, MigrationInfo] = {}  # every migration, in start order
        self._seen: set[str] = set()  # running migrations `migrations()` reported once

    def _get(self, name: str) -> dict[str, Any]:
        if name not in self.flows:
            raise DataflowNotFound(name)
        return self.flows[name]

    def deploy(self, spec: dict[str, Any]) -> str:
        old = self.flows.get(spec["name"])
        if old is not None and old["state"] in LIVE_STATES:
            raise DataflowExists(spec["name"])
        admission = self.predict(spec)
        admission["warnings"] = [f"{o['name']}: {o['reason']}" for o in admission["outcomes"]
                                 if o["verdict"] == "misses"]
        if admission["warnings"] and self.admission == "refuse":  # as the pool's controller
            raise AdmissionRefused(f"admitting {spec['name']!r} is predicted to make others "
                                   "miss. Fix: grow the pool", admission)
        self.deploys += 1
        self.flows[spec["name"]] = {"spec": json.loads(json.dumps(spec)), "events": 0,
                                    "executors": [0, 1], "submitted_at": 100.0,
                                    "state": "running", "released": False, "cause": None,
                                    "final": None, "ended_at": None, "lost": False,
                                    "admission": admission}
        return str(spec["name"])

    #: executor ms one event costs in this fake, for admission control's predictions
    cost_ms_per_event = 0.01
    #: the pool's admission setting: "admit", "warn" or "refuse"
    admission = "warn"

    def predict(self, dataflow: dict[str, Any] | None = None) -> dict[str, Any]:
        """The real model over the fake's dataflows, each at its spec's expected rate."""
        def demand(spec: dict[str, Any]) -> Demand:
            return Demand(spec["name"], spec["tenant"], spec["scheduling"]["weight"],
                          spec["latency_target_ms"], spec["scheduling"].get("expected_rate_eps"),
                          self.cost_ms_per_event)
        running = [demand(f["spec"]) for n, f in self.flows.items()
                   if f["state"] in LIVE_STATES and (dataflow is None or n != dataflow["name"])]
        new = None if dataflow is None else demand(DataflowSpec.from_dict(dataflow).to_dict())
        return predict(1000.0 * len(self.executors), running, new).to_dict()

    def end(self, name: str, state: str, cause: str | None = None, *, lost: bool = False) -> None:
        """What the pool's monitor does: a dataflow finishes, or fails (its parts freed)."""
        f = self._get(name)
        if state != "finished":
            f["final"], f["released"] = self.stats(name), True
        f.update(state=state, cause=cause, ended_at=200.0, lost=lost)

    def cancel(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        was_live = f["state"] in LIVE_STATES
        if was_live:
            self.end(name, "cancelled")
        f["released"] = True
        return {"name": name, "state": f["state"], "messages_dropped": 0,
                "ended_before": not was_live}

    def update(self, name: str, *, latency_target_ms: float | None,
               weight: float | None) -> dict[str, Any]:
        f = self._get(name)
        if f["state"] not in LIVE_STATES:
            raise DataflowEnded(name, f["state"], f["cause"])
        spec = f["spec"]
        if latency_target_ms is not None:
            spec["latency_target_ms"] = latency_target_ms
        if weight is not None:
            spec["scheduling"]["weight"] = weight
        return {"name": name, "latency_target_ms": spec["latency_target_ms"],
                "weight": spec["scheduling"]["weight"]}

    def list(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return [{"name": n, "tenant": f["spec"]["tenant"],
                 "latency_target_ms": f["spec"]["latency_target_ms"], "state": f["state"],
                 "executors": f["executors"], "submitted_at": f["submitted_at"],
                 "ended_at": f["ended_at"]}
                for n, f in self.flows.items() if not states or f["state"] in states]

    def describe(self, name: str, *, refresh: bool = False) -> dict[str, Any]:
        """Its record: instance i of every step on executor i % 2; a history of one
        transition, and its checkpoints and changes as the test set them."""
        f = self._get(name)
        hosts = {f"{name}/{s['id']}/{i}": i % 2 for s in f["spec"]["steps"]
                 for i in range(int(s.get("parallelism", 1)))}
        return {"name": name, "spec": f["spec"], "executors": f["executors"], "hosts": hosts,
                "state": f["state"], "submitted_at": f["submitted_at"], "ended_at": f["ended_at"],
                "cause": f["cause"],
                "history": [{"state": "running", "at": f["submitted_at"], "reason": "submitted"}],
                "exceptions": [], "final": f["final"],
                "released": f["released"], "lost": f["lost"], "state_bytes": 0,
                "admission": f["admission"], "changes": list(f.get("changes", [])),
                "checkpoints": {"interval_s": 1.0, "last": None, "last_at": None,
                                "last_duration_s": None, "last_bytes": 0, "completed": 0,
                                "failed": 0, "last_restore": None,
                                "history": list(f.get("checkpoints", []))}}

    def stats(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        n = f["events"]
        return {"results": n, "within_target": 1.0 if n else None, "p50_ms": 5.0 if n else None,
                "p95_ms": 5.0 if n else None, "p99_ms": 5.0 if n else None,
                "max_ms": 5.0 if n else None, "mean_ms": 5.0 if n else None,
                "events_in": n, "events_out": n, "backlog": 0, "errors": {"s:malformed": 1},
                "failures": [], "sources": ["s"]}

    def push(self, name: str, source: str, events: list[dict[str, Any]]) -> list[Rejected]:
        """Refuses what msgpack cannot carry, as the runtime does (with its own packing)."""
        f = self._get(name)
        rejected = pack_ingest(source, list(events)).rejected
        refused = {r["index"] for r in rejected}
        good = [e for i, e in enumerate(events) if i not in refused]
        f["events"] += len(good)
        self._append_results(name, good)
        return rejected

    def pressure(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        full = list(f.get("full_sinks", []))
        return {"full_sinks": full, "rooms": {s: 0 for s in full}, "waiting": {},
                "limit": 20_000}

    def close(self, name: str) -> None:
        f = self._get(name)
        self.closed.append(name)
        if f["state"] == "running":
            f["state"] = "finishing"

    def executor_stats(self) -> list[dict[str, Any]]:
        gone = [{"executor": i, "alive": False, "faults": [f"executor {i} removed by a client"]}
                for i in sorted(self.removed)]
        return [{"executor": 0, "node": "n" * 40, "activations": 2, "backlog": 0, "executed": 9,
                 "slices": 3, "preempted": 1, "overdue": 0, "busy_ms": 1500.0, "overhead_ms": 2.0,
                 "overhead_us_per_message": 3.5, "held": 0, "faults": []}
                for i in (0,) if i not in self.removed] + gone

    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None:
        return None

    def explain(self, name: str | None = None, *, last_s: float = 60.0) -> dict[str, Any]:
        """An explanation of the runtime's shape: each live dataflow spent 40% of its critical
        path processing in its second step on executor 0, 30% waiting behind the next live
        dataflow (or idle when alone), 20% in transfer, 10% untraced."""
        self.explained = (name, last_s)
        live = [n for n, f in self.flows.items() if f["state"] in LIVE_STATES]
        names = [name] if name is not None else live
        target = self._get(name)["spec"]["latency_target_ms"] if name is not None else None
        path: list[dict[str, Any]] = []
        operators: dict[str, float] = {}
        share = 1.0 / max(1, len(names))
        for n in names:
            steps = [st["id"] for st in self._get(n)["spec"]["steps"]]
            step = steps[1] if len(steps) > 1 else steps[0]
            others = [o for o in live if o != n]
            behind = others[0] if others else None
            parts = [(0.4, "processing", step, 0, None, None),
                     (0.3, "waiting" if behind else "idle", step, 0, None, behind),
                     (0.2, "transfer", steps[-1], 1, 0, None), (0.1, "untraced", None, None,
                                                                 None, None)]
            for frac, kind, st, ex, src, bh in parts:
                text = (f"{round(100 * frac * share)}% {kind} in {n}/{st} on executor {ex}"
                        if st else f"{round(100 * frac * share)}% {kind}")
                if bh:
                    text = f"{round(100 * frac * share)}% waiting in {n}/{st} behind {bh}"
                path.append({"share": frac * share, "ms": 1000.0 * frac * share, "kind": kind,
                             "dataflow": n, "step": st, "executor": ex, "from_executor": src,
                             "behind": bh, "behind_step": "map_1" if bh else None,
                             "text": text})
            if n == name:
                operators = {step: 0.7, steps[-1]: 0.2}
        path.sort(key=lambda c: -c["share"])
        results = sum(self._get(n)["events"] for n in names)
        subject = name or "the pool"
        by_op: dict[str, float] = {}
        by_df: dict[str, float] = {}
        waiting: dict[str, float] = {}
        for c in path:
            if c["step"]:
                key = f"{c['dataflow']}/{c['step']}"
                by_op[key] = by_op.get(key, 0.0) + c["share"]
            by_df[c["dataflow"]] = by_df.get(c["dataflow"], 0.0) + c["share"]
            if c["behind"]:
                waiting[c["behind"]] = waiting.get(c["behind"], 0.0) + c["share"]
        # The late results' path: the waits behind other dataflows, as a share of it.
        behind = [c for c in path if c["dataflow"] == name and c["behind"]]
        total = sum(c["share"] for c in behind)
        late = [{**c, "share": c["share"] / total, "text": f"{round(100 * c['share'] / total)}% "
                 f"waiting in {c['dataflow']}/{c['step']} behind {c['behind']}"} for c in behind]
        return {
            "dataflow": name, "last_s": last_s, "from_ms": 190_000.0, "to_ms": 200_000.0,
            "snapshots": 3, "activities": 10 * results, "latency_target_ms": target,
            "results": results, "within_target": 0.9 if results else None,
            "latency": [{"t_ms": 190_000.0 + 5000.0 * i, "results": results, "within": results,
                         "p50_ms": 5.0 + i, "p99_ms": 20.0 + 40 * i, "max_ms": 90.0}
                        for i in range(3)],
            "operators": operators, "critical_path": path,
            "summary": {"by_type": {"processing": 0.4, "waiting": 0.3, "transfer": 0.2,
                                    "untraced": 0.1},
                        "by_operator": by_op, "by_executor": {"0": 0.7, "1": 0.2},
                        "by_channel": {"0->1": 0.2}, "by_dataflow": by_df,
                        "waiting_behind": waiting},
            "words": [f"{subject}: 90% of {results} traced results within target; the "
                      "critical path was mostly processing"] + [c["text"] for c in path],
            "late_paths": 1 if late else 0, "late_path": late,
            "late_words": [f"{subject}: 1 result message over its target; their critical "
                           "path:"] + [c["text"] for c in late] if late else [],
            "tracing": {"lost": 0, "collected": 10 * results, "cpu_s": 0.1,
                        "analysed_per_s": 30_000.0, "traced_per_s": 1_000.0}}

    # -- outputs with offsets, as the runtime keeps them (read without commit) -----------------
    def _outputs(self, name: str) -> FakeOutputs:
        f = self._get(name)
        if f.get("released"):  # cancelled or failed: its logs went with its parts
            raise DataflowEnded(name, f["state"], f.get("cause"))
        if "outputs" not in f:
            f["outputs"] = FakeOutputs(name, f["spec"], f["executors"])
        return f["outputs"]  # type: ignore[no-any-return]

    def _append_results(self, name: str, events: list[dict[str, Any]]) -> None:
        """Every event becomes a result of every sink, round robin over its instances,
        ingested at ms `seq` and out 5 ms later."""
        if self._get(name).get("released"):
            return
        out = self._outputs(name)
        sinks: dict[str, list[FakeLog]] = {}
        for log_id, log in out.results.items():
            sinks.setdefault(log_id.split("/")[1], []).append(log)
        for event in events:
            t = float(out.seq)
            for logs in sinks.values():
                logs[out.seq % len(logs)].rows.append((dict(event), t, t + 5.0))
            out.seq += 1

    def add_errors(self, name: str, records: list[dict[str, Any]], executor: int = 0) -> None:
        """Records reach the error output on one executor; beyond `error_capacity` unread
        ones the oldest are dropped and counted, as the runtime does."""
        out = self._outputs(name)
        log_id = f"{name}/errors/{executor}"
        log = out.errors[log_id]
        for r in records:
            t = float(out.seq)
            log.rows.append((dict(r), t, t + 5.0))
            out.seq += 1
        excess = len(log.rows) - self.error_capacity
        if excess > 0:
            log.commit(log.committed + excess)
            out.dropped[log_id] += excess

    def result_offsets(self, name: str, sink: str | None = None) -> dict[str, tuple[int, int]]:
        return {a: (log.committed, log.end) for a, log in self._outputs(name).results.items()
                if sink is None or a.split("/")[1] == sink}

    def read_results(self, name: str, sink_activation: str, start: int, end: int | None = None
                     ) -> list[tuple[Any, float, float]]:
        self.reads.append((sink_activation, start, end))
        return self._outputs(name).results[sink_activation].read(start, end)

    def read_result_columns(self, name: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any:
        self.reads.append((sink_activation, start, end))
        return results_table([([e], ing, eg) for e, ing, eg
                              in self._outputs(name).results[sink_activation].read(start, end)])

    def commit_results(self, name: str, sink_activation: str, offset: int) -> None:
        self._outputs(name).results[sink_activation].commit(offset)

    def error_offsets(self, name: str) -> dict[str, tuple[int, int, int]]:
        out = self._outputs(name)
        return {log_id: (log.committed, log.end, out.dropped[log_id])
                for log_id, log in out.errors.items()}

    def read_errors(self, name: str, log: str, start: int, end: int | None = None
                    ) -> tuple[int, list[tuple[Any, float, float]]]:
        self.reads.append((log, start, end))
        kept = self._outputs(name).errors[log]
        first = max(start, kept.committed)  # rows dropped unread are skipped over
        return first, kept.read(first, end)

    def commit_errors(self, name: str, log: str, offset: int) -> None:
        self._outputs(name).errors[log].commit(offset)

    # -- live reconfiguration ------------------------------------------------------------------
    # A migration starts "running"; the first `migrations()` call that reports it still says
    # "running", the next one finds it "done" (every bin moved, 1000 bytes of state a bin,
    # 10 ms an epoch). So a test sees both states, and a conflict while it runs, without time.
    def _migration(self, name: str, step: str, kind: str, strategy: str, bins: int,
                   batch_bins: int | None, from_p: int, to_p: int) -> MigrationInfo:
        if strategy not in STRATEGIES:
            raise ReconfigError(f"dataflow {name!r}, step {step!r}",
                                f"a strategy among {list(STRATEGIES)}", strategy,
                                "use batched (the default)")
        epochs = 0 if not bins else 1 if strategy == "all_at_once" else bins \
            if strategy == "fluid" else -(-bins // (batch_bins or max(1, -(-bins // 8))))
        m: MigrationInfo = {
            "id": f"m{len(self.moves) + 1}", "dataflow": name, "step": step, "kind": kind,
            "strategy": strategy, "state": "running", "from_parallelism": from_p,
            "to_parallelism": to_p, "bins_total": bins, "bins_moved": 0,
            "epochs_total": epochs, "epochs_done": 0, "bytes_moved": 0, "started_at": 300.0,
            "ended_at": None, "duration_s": 0.0, "error": None}
        self.moves[m["id"]] = m
        return dict(m)  # type: ignore[return-value]

    def _keyed_step(self, name: str, step: str) -> dict[str, Any]:
        """A live dataflow's keyed step (a window or join after key_by), else the refusal."""
        f = self._get(name)
        if f["state"] not in LIVE_STATES:
            raise DataflowEnded(name, f["state"], f["cause"])
        where = f"dataflow {name!r}, step {step!r}"
        steps = {s["id"]: s for s in f["spec"]["steps"]}
        if step not in steps:
            raise ReconfigError(where, f"a step of the dataflow, one of {sorted(steps)}", step,
                                "name a window or join step that follows key_by")
        spec = DataflowSpec.from_dict(f["spec"])
        s = steps[step]
        if s["op"] not in ("window", "join", "process") or any(stream_key(spec, i) is None
                                                    for i in s["inputs"]):
            raise ReconfigError(where, "a keyed step (a window or join after key_by)",
                                f"a {s['op']} step", "scale or migrate a keyed window or join")
        running = [m["id"] for m in self.moves.values()
                   if m["dataflow"] == name and m["state"] == "running"]
        if running:
            raise ReconfigConflict(f"dataflow {name!r}", "no migration of the dataflow under "
                                   "way", f"migration {running[0]} running",
                                   "wait until it is done (`cameo migrations`), then retry")
        return s

    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None) -> MigrationInfo:
        s = self._keyed_step(name, step)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) \
                or not 1 <= parallelism <= BINS:
            raise ReconfigError(f"dataflow {name!r}, step {step!r}",
                                f"parallelism an integer from 1 to {BINS}", parallelism,
                                f"scale to at most {BINS} instances (one key bin each)")
        old = s.get("parallelism", 1)
        # The bins that change owner: about those of the instances added or removed.
        moved = 0 if parallelism == old else BINS * abs(parallelism - old) // max(parallelism, old)
        m = self._migration(name, step, "scale", strategy, moved, batch_bins, old, parallelism)
        s["parallelism"] = parallelism
        return m

    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None) -> MigrationInfo:
        s = self._keyed_step(name, step)
        p, where = s.get("parallelism", 1), f"dataflow {name!r}, step {step!r}"
        if bins is not None and to_instance is not None:
            if not 0 <= to_instance < p:
                raise ReconfigError(where, f"to_instance from 0 to {p - 1}", to_instance,
                                    "move the bins to an instance of the step")
            bad = [b for b in bins if not 0 <= b < BINS]
            if bad:
                raise ReconfigError(where, f"bins from 0 to {BINS - 1}", bad[0],
                                    "name key bins of the step")
            return self._migration(name, step, "migrate", strategy, len(set(bins)), batch_bins,
                                   p, p)
        if instance is not None and to_executor is not None:
            if not 0 <= instance < p:
                raise ReconfigError(where, f"instance from 0 to {p - 1}", instance,
                                    "move an instance of the step")
            if to_executor not in self.executors:
                raise ReconfigError(where, f"an executor of the pool, one of {self.executors}",
                                    to_executor, "see `cameo executors`")
            return self._migration(name, step, "move_instance", strategy, BINS // p,
                                   batch_bins, p, p)
        raise ReconfigError(where, "bins and to_instance, or instance and to_executor",
                            "neither pair", "say what moves where")

    def migrations(self, name: str | None = None) -> list[MigrationInfo]:
        if name is not None:
            self._get(name)
        for m in self.moves.values():
            if m["state"] == "running" and m["id"] in self._seen:
                m.update(state="done", bins_moved=m["bins_total"], epochs_done=m["epochs_total"],
                         bytes_moved=1000 * m["bins_total"], ended_at=301.5,
                         duration_s=0.01 * m["epochs_total"])
        shown = [dict(m) for m in self.moves.values() if name is None or m["dataflow"] == name]
        self._seen.update(m["id"] for m in shown if m["state"] == "running")
        return shown  # type: ignore[return-value]

    def rebalance(self, *, strategy: str = "batched") -> list[MigrationInfo]:
        """One bin migration per live dataflow's keyed step with more than one instance
        (those with a migration under way are left alone)."""
        started = []
        for name, f in self.flows.items():
            if f["state"] not in LIVE_STATES:
                continue
            for s in f["spec"]["steps"]:
                if s.get("parallelism", 1) > 1 and s["op"] in ("window", "join"):
                    try:
                        self._keyed_step(name, s["id"])
                    except ReconfigConflict:
                        continue
                    started.append(self._migration(name, s["id"], "migrate", strategy, 64, None,
                                                   s["parallelism"], s["parallelism"]))
        return started

    def add_executors(self, n: int = 1) -> list[int]:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
            raise ReconfigError("pool", "from 1 to 64 executors", n, "add at most 64 at a time")
        first = max(self.executors, default=-1) + 1
        added = list(range(first, first + n))
        self.executors += added
        return added

    def remove_executor(self, index: int, *, strategy: str = "batched") -> dict[str, Any]:
        if index not in self.executors:
            raise ReconfigError("pool", f"an executor of the pool, one of {self.executors}",
                                index, "see `cameo executors`")
        if len(self.executors) == 1:
            raise ReconfigConflict("pool", "another executor to take its instances",
                                   f"executor {index} is the last one",
                                   "add an executor first (`cameo pool add`)")
        self.executors.remove(index)
        self.removed.add(index)  # at once: the fake's moves take no time
        moving = [f"{name}/{s['id']}/0" for name, f in self.flows.items()
                  if f["state"] in LIVE_STATES and index in f["executors"]
                  for s in f["spec"]["steps"] if s["op"] in ("window", "join")]
        for aid in moving:
            name, step, _ = aid.split("/")
            self._migration(name, step, "move_instance", strategy, 1024, None, 1, 1)
        return {"executor": index, "moving": moving, "state": "draining"}

    def stats_all(self) -> Any:
        return self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        dataflows = []
        for name, f in self.flows.items():
            n = f["events"]
            buckets = [0] * 14
            buckets[2] = n  # 5 ms
            dataflows.append({"name": name, "tenant": f["spec"]["tenant"],
                              "target_ms": f["spec"]["latency_target_ms"],
                              "weight": f["spec"]["scheduling"]["weight"], "results": n,
                              "within_target_count": n, "sum_ms": 5.0 * n, "buckets": buckets,
                              "p50_ms": 5.0 if n else None, "p95_ms": None, "p99_ms": None,
                              "events_in": n, "events_out": n, "backlog": 0,
                              "errors": {"s:malformed": 1}})
            if f["state"] not in LIVE_STATES:  # as the runtime's: live and finished ones
                dataflows.pop()
        return {"dataflows": dataflows, "executors": self.executor_stats(),
                "migrations": [dict(m) for m in self.moves.values()], "overload": self.predict(),
                "critical_path": {
                    "by_operator": {f"{n}/{f['spec']['steps'][-1]['id']}": 0.25
                                    for n, f in self.flows.items()},
                    "by_executor": {"0": 0.6, "1": 0.4}}}


def flow(name: str, tenant: str = "ops", target: float = 50) -> Dataflow:
    return (Dataflow(name, latency_target_ms=target, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").filter("level == 'ERROR'").sink("o"))


class Service:
    def __init__(self, history: History | None = None) -> None:
        self.rt = FakeRuntime()
        self.clock = FakeClock(200_000.0)
        self.core = ServiceCore(self.rt, clock=self.clock, allowed_modules=("tests.",),
                                history=history)
        self.tokens = TokenStore(ADMIN)
        self.app = create_app(self.core, self.tokens, max_spec_bytes=4096, max_body_bytes=8192,
                              snapshot=self.rt.snapshot, info=lambda: {"pool": "fake"})
        self.http = TestClient(self.app)

    def client(self, token: str | None) -> Client:
        return Client("http://testserver", token or "", http=TestClient(self.app))

    def tenant_token(self, tenant: str) -> str:
        return self.tokens.create(tenant)[0]


def auth(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
