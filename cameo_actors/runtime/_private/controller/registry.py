"""The registry of dataflows: each one's record and lifecycle, and its placement,
kept in the checkpoint storage so that a restarted controller (or a new service on
a new Ray) reads it and goes on. Records change only through these methods, and their
state only by the events of the lifecycle's table (`runtime/lifecycle.py`)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage, StorageError
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime._private.stats import dataflow_stats
from cameo_actors.runtime.boundary import (
    FAILED,
    LIVE_STATES,
    RECOVERING,
    CheckpointPhases,
    CheckpointRecord,
    DataflowInfo,
    DataflowSummary,
    RestoreSummary,
)
from cameo_actors.runtime.exceptions import DataflowEnded, DataflowNotFound
from cameo_actors.runtime.interface import ControlAPI, serves
from cameo_actors.runtime.lifecycle import CAUSED_STATES, LifecycleEvent, Step, step

logger = logging.getLogger(__name__)
#: Operator failures kept with a dataflow's record when it ends.
EXCEPTIONS_KEPT = 10
#: Checkpoints (completed or not) and live changes kept in a dataflow's record, the newest:
#: its console's history, bounded so that a saved registry stays small.
CHECKPOINTS_KEPT = 100
CHANGES_KEPT = 100


class Registry:
    def __init__(self, pool_name: str, pool: Pool, storage: CheckpointStorage | None,
                 resumable: bool) -> None:
        self.pool_name, self.pool, self.storage = pool_name, pool, storage
        self.lock = pool.lock
        #: the registry says a next start may restore it (`Runtime.start(resume=True)`,
        #: `cameo serve`): a start afresh then refuses to delete it
        self.resumable = resumable
        #: every dataflow, live or ended (kept for `ended_retention_s`)
        self.dataflows: dict[str, DataflowInfo] = {}
        #: where each kept dataflow's instances run, and its routing tables
        self.placements: dict[str, Placement] = {}
        #: (tenant, state) -> transitions into that state since the pool started
        self.transitions: Counter[tuple[str, str]] = Counter()
        #: the last migration's number (ids never repeat, across restarts too)
        self.migration_seq = 0
        #: called with a dataflow's name once its parts are freed
        self.on_release: list[Callable[[str], None]] = []
        #: records changed since the last save that need no save of their own (a
        #: checkpoint's record): the monitor saves them on its next round
        self.unsaved = False

    # -- storage ---------------------------------------------------------------------------
    def save(self) -> None:
        """Write the registry (dataflows, placements, executors) to storage: what a
        restarted controller or service needs to go on."""
        if self.storage is None:
            return
        pool = self.pool
        with self.lock:
            self.unsaved = False
            data = {"pool": self.pool_name, "resumable": self.resumable,
                    "owner": {"host": socket.gethostname(), "pid": os.getpid()},
                    "executors": pool.size(),
                    "incarnations": {str(i): inc for i, inc in pool.incarnations.items()},
                    "dead": {str(i): why for i, why in pool.dead.items()},
                    "standby": sorted(pool.standby),
                    "dataflows": dict(self.dataflows),
                    "placements": {n: p.to_dict() for n, p in self.placements.items()},
                    "migration_seq": self.migration_seq}
        try:
            self.storage.save_registry(data)
        except Exception:  # the next change writes it again
            logger.exception("controller: the registry could not be saved")

    def load(self, registry: dict[str, Any]) -> None:
        """Take the dataflows, placements and gone executors of a saved registry."""
        self.dataflows = registry["dataflows"]
        self.placements = {n: Placement.from_dict(p) for n, p in registry["placements"].items()}
        self.pool.dead = {int(i): why for i, why in registry["dead"].items()}
        self.pool.standby = set(registry.get("standby", ()))  # a registry of before: none
        self.migration_seq = registry["migration_seq"]
        for name, placement in self.placements.items():
            if not self.dataflows[name]["released"]:
                self.pool.placed(None, placement)

    def drop_storage(self, info: DataflowInfo) -> None:
        """Delete a dataflow's checkpoints (a part still being written may be in the way
        for a moment: tried again once)."""
        for attempt in (1, 2):
            try:
                if self.storage is not None:
                    self.storage.drop(info["name"], info["deployment"])
                return
            except StorageError as e:
                if attempt == 2:
                    logger.warning("the checkpoints of %s could not be deleted: %s",
                                   info["name"], e)
                time.sleep(0.2)

    def forget_all(self) -> None:
        """The pool stops for good: its checkpoints and its registry go."""
        if self.storage is not None:
            for info in list(self.dataflows.values()):
                self.drop_storage(info)
            self.storage.save_registry({})

    # -- lookups ---------------------------------------------------------------------------
    @serves(ControlAPI.describe)
    def record(self, name: str) -> DataflowInfo:
        info = self.dataflows.get(name)
        if info is None:
            raise DataflowNotFound(name, sorted(self.dataflows))
        return info

    def live(self, name: str) -> DataflowInfo:
        """A live dataflow's record (running, finishing or recovering)."""
        info = self.record(name)
        if info["state"] not in LIVE_STATES:
            raise DataflowEnded(name, info["state"], info["cause"])
        return info

    def named(self, states: Sequence[str]) -> list[DataflowInfo]:
        """The records in `states` (a copy of the list: safe to read unlocked)."""
        return [d for d in list(self.dataflows.values()) if d["state"] in states]

    @serves(ControlAPI.list)
    def summaries(self, states: Sequence[str] | None = None) -> list[DataflowSummary]:
        """Every dataflow kept (live and ended), or those in `states`."""
        return [{"name": n, "tenant": d["spec"]["tenant"],
                 "latency_target_ms": d["spec"]["latency_target_ms"], "state": d["state"],
                 "executors": d["executors"], "submitted_at": d["submitted_at"],
                 "ended_at": d["ended_at"]}
                for n, d in list(self.dataflows.items()) if not states or d["state"] in states]

    @serves(ControllerAPI.lifecycle_counts)
    def lifecycle_counts(self) -> tuple[list[tuple[str, str, int]], dict[str, int]]:
        """(transitions per (tenant, state) since the pool started, dataflows per state now)."""
        now = Counter(d["state"] for d in list(self.dataflows.values()))
        return [(t, s, n) for (t, s), n in sorted(self.transitions.items())], dict(now)

    def lessees_of(self, name: str) -> dict[str, list[str]]:
        """step -> its lessee instances (Dirigo), for the dataflows that have some."""
        placement = self.placements.get(name)
        out: dict[str, list[str]] = {}
        for aid in sorted(placement.lessees if placement else (), key=str):
            out.setdefault(aid.step, []).append(str(aid))
        return out

    def kept(self) -> dict[str, Placement]:
        """The placements of the dataflows whose parts still run."""
        return {n: p for n, p in list(self.placements.items())
                if not self.dataflows[n]["released"]}

    # -- changes ---------------------------------------------------------------------------
    def add(self, name: str, spec: dict[str, Any], placement: Placement, deployment: str,
            interval_s: float, admission: dict[str, Any]) -> DataflowInfo:
        """The record of a dataflow just deployed (running)."""
        first = step(None, LifecycleEvent.SUBMITTED, dataflow=name)
        old = self.dataflows.get(name)
        if old is not None:  # an ended run of the same name: its record (and results) go
            self.release(old)
        self.pool.placed(None, placement)
        self.placements[name] = placement
        info: DataflowInfo = {
            "name": name, "spec": spec, "hosts": placement.hosts,
            "executors": sorted(placement.executors()), "state": first.state.value,
            "submitted_at": time.time(), "ended_at": None, "cause": None, "history": [],
            "exceptions": [], "final": None, "released": False, "lost": False,
            "state_bytes": 0, "state_disk_bytes": 0, "deployment": deployment,
            "checkpoints": {"interval_s": interval_s, "last": None, "last_at": None,
                            "last_duration_s": None, "last_bytes": 0, "completed": 0,
                            "failed": 0, "last_restore": None},
            "recoveries": 0, "recoveries_in_a_row": 0, "resume_state": None,
            "admission": admission}
        self.dataflows[name] = info
        self._entered(info, "submitted")
        return info

    def enter(self, info: DataflowInfo, event: LifecycleEvent, reason: str | None) -> None:
        """Apply `event` to the record by the lifecycle's table (`runtime/lifecycle.py`).

        Raises:
            IllegalTransition: its state does not allow `event` (a bug where it was
                applied); nothing of the record changed.
        """
        self._apply(info, self._step(info, event), reason)

    def _step(self, info: DataflowInfo, event: LifecycleEvent) -> Step:
        """Where `event` takes the record (`IllegalTransition` if nowhere): nothing changed."""
        return step(info["state"], event, info["resume_state"], dataflow=info["name"])

    def _apply(self, info: DataflowInfo, moved: Step, reason: str | None) -> None:
        """The record takes the state (and resume state) `moved`, from `_step`. A move to
        the state it is in records nothing (a repeated or late event)."""
        resume = None if moved.resume_state is None else moved.resume_state.value
        if moved.state == info["state"]:
            if resume != info["resume_state"]:  # closed while recovering: resumes finishing
                info["resume_state"] = resume
                self.save()
            return
        info["resume_state"] = resume
        if moved.state not in CAUSED_STATES:  # restored: the cause is gone, before it is saved
            info["cause"] = None
        info["state"] = moved.state.value  # a plain string: records travel and are saved
        self._entered(info, reason)

    def _entered(self, info: DataflowInfo, reason: str | None) -> None:
        """The record just entered its state: history, end time, the count, saved."""
        now, state = time.time(), info["state"]
        info["history"].append({"state": state, "at": now, "reason": reason})
        if state not in LIVE_STATES:
            info["ended_at"] = now
        self.transitions[(info["spec"]["tenant"], state)] += 1
        self.save()

    def end(self, info: DataflowInfo, event: LifecycleEvent, reason: str) -> int:
        """Keep the last statistics and failures, free the parts, apply `event` (cancelled
        or failed); returns the messages dropped. One that ended already (a move to its
        own state) only frees what it kept, a finished one's results: nothing else changes.

        Raises:
            IllegalTransition: its state does not allow `event`; nothing changed.
        """
        moved = self._step(info, event)  # before anything is freed
        if moved.state == info["state"]:
            return self.release(info)
        live = [i for i in info["executors"] if i not in self.pool.dead]
        gateway = self.pool.gateway
        parts = gateway.gather_each(gateway.send_all(live, ExecutorAPI.dataflow_stats,
                                                     info["name"]), timeout_s=10.0)
        answered = [p for p in parts if p is not None]
        if answered:
            final = dataflow_stats(info, answered)
            info["final"] = dict(final)
            info["exceptions"] = list(final["failures"])[-EXCEPTIONS_KEPT:]
        dropped = self.release(info)
        if moved.state == FAILED:
            info["cause"] = reason
        self._apply(info, moved, reason)
        return dropped

    def release(self, info: DataflowInfo) -> int:
        """Free a dataflow's parts on the executors that live; returns messages dropped."""
        if info["released"]:
            return 0
        live = [i for i in info["executors"] if i not in self.pool.dead]
        dropped = self.pool.gateway.call_each(live, ExecutorAPI.cancel, info["name"])
        self.pool.placed(self.placements.get(info["name"]), None)
        info["released"] = True
        for hook in self.on_release:
            hook(info["name"])
        self.drop_storage(info)
        return sum(d for d in dropped if d is not None)

    def fail(self, name: str, cause: str, *, lost: bool = False) -> None:
        """End a live dataflow as failed, free its parts on the executors that live.
        `lost`: a part of the pool died under it (a retry may work once it is restored)."""
        with self.lock:
            info = self.dataflows.get(name)
            # Forgotten, or ended already (cancelled or failed: the table keeps it so).
            if info is None or self._step(info, LifecycleEvent.FAILED).state == info["state"]:
                return
            logger.warning("dataflow %s failed: %s", name, cause)
            info["lost"] = lost
            self.end(info, LifecycleEvent.FAILED, cause)

    def closing(self, info: DataflowInfo) -> None:
        """Its sources were closed: it drains (finishing), now or, recovering, once
        restored (the table moves its resume_state); closed again, nothing changes."""
        self.enter(info, LifecycleEvent.SOURCES_CLOSED, "sources closed")

    def retarget(self, info: DataflowInfo, latency_target_ms: float | None,
                 weight: float | None) -> None:
        """New live settings (None: unchanged), kept in its changes and saved."""
        said = []
        spec = info["spec"]
        if latency_target_ms is not None:
            said.append(f"latency target {spec['latency_target_ms']:g} ms -> "
                        f"{latency_target_ms:g} ms")
            spec["latency_target_ms"] = latency_target_ms
        if weight is not None:
            said.append(f"weight {spec['scheduling']['weight']:g} -> {weight:g}")
            spec["scheduling"]["weight"] = weight
        if said:
            changes = info.setdefault("changes", [])
            changes.append({"at": time.time(), "what": ", ".join(said)})
            del changes[:-CHANGES_KEPT]
            self.save()

    def measured(self, info: DataflowInfo, state_bytes: int, disk_bytes: int = 0) -> None:
        """Its operator state and unread results in memory, and its state on disk, as the
        executors last reported."""
        info["state_bytes"] = state_bytes
        info["state_disk_bytes"] = disk_bytes

    def restore_started(self, info: DataflowInfo, again: bool) -> tuple[int, int]:
        """A restore begins: (its generation, losses in a row without a checkpoint
        completing; a retry of the same loss does not count)."""
        info["recoveries"] += 1
        info["recoveries_in_a_row"] += not again
        return info["recoveries"], info["recoveries_in_a_row"]

    def mark_recovering(self, info: DataflowInfo, why: str) -> None:
        """A part of the pool it ran on was lost: it is recovering (again: the new cause),
        and goes back to the state it had once restored (`resume_state`).

        Raises:
            IllegalTransition: it ended (nothing of it is restored); nothing changed.
        """
        moved = self._step(info, LifecycleEvent.EXECUTOR_LOST)
        info["cause"] = why  # first: a reader never sees `recovering` without its cause
        self._apply(info, moved, why)

    def restored(self, info: DataflowInfo, spec: dict[str, Any], placement: Placement,
                 phases: RestoreSummary, note: str = "") -> None:
        """A dataflow runs again from checkpoint `phases["checkpoint"]`, on `placement`
        (`note`: why newer checkpoints were skipped, for its history). One cancelled or
        failed during the restore stays so.

        Raises:
            IllegalTransition: it was neither recovering nor ended; nothing changed.
        """
        moved = self._step(info, LifecycleEvent.RESTORED)
        self.placed(info, placement)
        info["spec"] = spec
        info["checkpoints"]["last_restore"] = phases
        if info["state"] == RECOVERING:
            self._apply(info, moved, f"restored from checkpoint {phases['checkpoint']}{note}: "
                                     f"waited {phases['waited_s']:.2f} s for its executors, "
                                     f"read {phases['read_bytes'] / 1e6:.1f} MB "
                                     f"({phases['read_local_bytes'] / 1e6:.1f} MB of it from "
                                     "local copies) in "
                                     f"{phases['read_s']:.2f} s, restored in "
                                     f"{phases['restored_s']:.2f} s")

    def recovering_since(self, info: DataflowInfo) -> float:
        """When the dataflow last became `recovering` (epoch seconds)."""
        return next(h["at"] for h in reversed(info["history"]) if h["state"] == RECOVERING)

    def placed(self, info: DataflowInfo, placement: Placement) -> None:
        """Record a dataflow's new placement: hosts, executors, load."""
        self.pool.placed(self.placements.get(info["name"]), placement)
        self.placements[info["name"]] = placement
        info["hosts"] = placement.hosts
        info["executors"] = sorted(placement.executors())

    def switched(self, name: str, placement: Placement) -> None:
        """A migration's epoch is done: the same instances, the step's next table."""
        self.placements[name] = placement

    def rescaled(self, info: DataflowInfo, step: str, parallelism: int) -> None:
        info["spec"]["steps"] = [{**s, "parallelism": parallelism} if s["id"] == step else s
                                 for s in info["spec"]["steps"]]

    def checkpointed(self, name: str, ckpt: int, duration_s: float,
                     parts: dict[str, tuple[int, int, bool]],
                     phases: CheckpointPhases | None = None) -> None:
        """Checkpoint `ckpt` completed; `parts`: activation -> (executor, bytes, whether
        it builds on earlier parts); `phases`: when its parts passed each phase."""
        size = sum(nbytes for _, nbytes, _ in parts.values())
        by_executor: Counter[str] = Counter()
        for ex, nbytes, _ in parts.values():
            by_executor[str(ex)] += nbytes
        with self.lock:
            info = self.dataflows[name]
            counts = info["checkpoints"]
            now = time.time()
            counts["last"], counts["last_at"], counts["last_bytes"] = ckpt, now, size
            counts["last_duration_s"] = duration_s
            counts["completed"] += 1
            info["recoveries_in_a_row"] = 0
            self._kept(info, {"id": ckpt, "at": now, "ok": True, "duration_s": duration_s,
                              "bytes": size, "parts": len(parts),
                              "incremental_parts": sum(inc for _, _, inc in parts.values()),
                              "executors": dict(by_executor), "reason": None,
                              "phases": phases})

    def checkpoint_failed(self, name: str, reason: str, ckpt: int | None = None,
                          duration_s: float = 0.0) -> None:
        with self.lock:
            info = self.dataflows.get(name)
            if info is not None:
                info["checkpoints"]["failed"] += 1
                self._kept(info, {"id": ckpt or 0, "at": time.time(), "ok": False,
                                  "duration_s": duration_s, "bytes": 0, "parts": 0,
                                  "incremental_parts": 0, "executors": {}, "reason": reason,
                                  "phases": None})

    def _kept(self, info: DataflowInfo, record: CheckpointRecord) -> None:
        history = info["checkpoints"].setdefault("history", [])
        history.append(record)
        del history[:-CHECKPOINTS_KEPT]
        self.unsaved = True

    def expire(self, kept: int, retention_s: float) -> None:
        """Forget the ended dataflows beyond the newest `kept`, or older than `retention_s`."""
        now = time.time()
        with self.lock:
            ended = sorted((d for d in self.dataflows.values() if d["ended_at"] is not None),
                           key=lambda d: d["ended_at"] or 0.0)
            excess = len(ended) - kept
            for i, info in enumerate(ended):
                if i < excess or now - (info["ended_at"] or now) > retention_s:
                    self.release(info)
                    del self.dataflows[info["name"]]
                    self.placements.pop(info["name"], None)
