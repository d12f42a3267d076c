"""The checkpoint coordinator: takes each dataflow's checkpoints when due, commits
their manifests, and tells the executors (results before a checkpoint become
readable, ingress logs are trimmed). The barriers and parts are the executors'
side (`checkpoint.py`).

A dataflow's checkpoints and its reconfigurations exclude each other (a cut and a
routing switch do not mix): a reconfiguration pauses them, waits for the one under
way, and resumes them when it ends (the next one then at once)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import Enum

from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.checkpoint.parts import phases_of
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor_api import ExecutorAPI, WrittenPart
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S, FINISHING, RUNNING
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import serves

logger = logging.getLogger(__name__)
#: How long a checkpoint may take from its barriers to its last part written.
CHECKPOINT_TIMEOUT_S = 60.0
#: Checkpoints under way at once (over all dataflows).
CHECKPOINT_THREADS = 4
#: How often the coordinator looks for checkpoints that are due.
TICK_S = 0.05
#: After a restore, the next `CATCH_UP_CHECKPOINTS` checkpoints follow each other this
#: soon (at most the interval; at least the last one's duration apart): the results a
#: restored dataflow makes while it catches up are read once a checkpoint after them
#: completes, and the first one, taken at once, is cut before most of them are made
#: (at the 5 s interval, the first new results then waited 5 s more).
CATCH_UP_S = 0.25
CATCH_UP_CHECKPOINTS = 3


@dataclass(frozen=True)
class Cut:
    """A checkpoint begun: its barriers are on their way through the dataflow."""

    dataflow: str
    ckpt: int
    placement: Placement
    by_executor: dict[int, list[str]]  # executor -> the activations it writes parts of
    sources: set[str]
    started: float  # monotonic


class CheckpointPhase(Enum):
    """Where a dataflow's checkpointing is."""

    WAITING = "waiting"  # for the next one to be due
    TAKING = "taking"  # one is under way
    PAUSED = "paused"  # a reconfiguration runs (one may still be under way: TAKING)


class CheckpointCoordinator:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        self.taking: set[str] = set()
        self.paused: set[str] = set()
        #: when each dataflow's next checkpoint is due (monotonic)
        self.due: dict[str, float] = {}
        #: restored dataflows: how many checkpoints are still to follow at `CATCH_UP_S`
        self.catching_up: dict[str, int] = {}
        self._changed = threading.Condition(registry.lock)
        self._threads = ThreadPoolExecutor(CHECKPOINT_THREADS, thread_name_prefix="cameo-ckpt")

    def phase(self, name: str) -> CheckpointPhase:
        if name in self.taking:
            return CheckpointPhase.TAKING
        return CheckpointPhase.PAUSED if name in self.paused else CheckpointPhase.WAITING

    def run(self, stopped: threading.Event) -> None:
        """Start each dataflow's checkpoint when it is due (one under way per dataflow;
        none while it is paused, recovering or ended)."""
        while not stopped.wait(TICK_S):
            now = time.monotonic()
            with self._changed:
                due = [d["name"] for d in self.registry.named((RUNNING, FINISHING))
                       if d["checkpoints"]["interval_s"] > 0
                       and self.phase(d["name"]) is CheckpointPhase.WAITING
                       and self.due.get(d["name"], 0.0) <= now]
                self.taking.update(due)
                self.due.update((name, math.inf) for name in due)  # under way
            for name in due:
                self._threads.submit(self._scheduled, name)

    def _scheduled(self, name: str) -> None:
        try:
            self.take(name)
        except CameoError as e:  # an executor is gone: recovery restores; next one on time
            self.registry.checkpoint_failed(name, str(e))
            logger.warning("checkpoint of %s failed: %s", name, e)
        except Exception as e:  # counted; the next one is tried on time
            self.registry.checkpoint_failed(name, f"{type(e).__name__}: {e}")
            logger.exception("checkpoint of %s failed", name)
        finally:
            with self._changed:
                info = self.registry.dataflows.get(name)
                # At least twice its last duration apart, as Flink's min pause: it never
                # takes the executor over; unless one was asked for meanwhile (`soon`).
                if info is not None and self.due.get(name) == math.inf:
                    counts = info["checkpoints"]
                    interval, last = counts["interval_s"], counts["last_duration_s"] or 0.0
                    pause = max(interval, 2 * last)
                    left = self.catching_up.pop(name, 0)
                    if left > 0:
                        pause = max(min(interval, CATCH_UP_S), last)
                        if left > 1:
                            self.catching_up[name] = left - 1
                    self.due[name] = time.monotonic() + pause
                self._done(name)

    def _done(self, name: str) -> None:
        self.taking.discard(name)
        self._changed.notify_all()

    def take(self, name: str) -> bool:
        """Checkpoint `name` now: barriers at its sources, wait for every activation's
        part, then the manifest (the checkpoint counts from then on) and the news to the
        executors (results before it readable, ingress logs trimmed). True if completed."""
        cut = self.begin(name)
        return self.commit(cut, self.collect(cut, CHECKPOINT_TIMEOUT_S))

    def begin(self, name: str) -> Cut:
        """Put the barriers of a new checkpoint of `name` into its sources."""
        info = self.registry.dataflows[name]
        placement = self.registry.placements[name]
        # Numbers never repeat, not even across a controller's restart: a barrier of an
        # abandoned checkpoint still in flight must not count for a new one.
        ckpt = max((info["checkpoints"]["last"] or 0) + 1, int(time.time() * 1000))
        by_executor: dict[int, list[str]] = {}
        for aid, ex in placement.hosts.items():
            by_executor.setdefault(ex, []).append(aid)
        sources = {str(a) for s in info["spec"]["steps"] if s["op"] == "source"
                   for a in placement.of_step(s["id"])}
        cut = Cut(name, ckpt, placement, by_executor, sources, time.monotonic())
        self.pool.gateway.call(sorted({placement.hosts[a] for a in sources}),
                               ExecutorAPI.checkpoint, name, ckpt)
        return cut

    def collect(self, cut: Cut, timeout_s: float) -> dict[str, WrittenPart]:
        """The parts of `cut` written so far, once all are or after `timeout_s`."""
        gateway = self.pool.gateway
        answers = gateway.gather_each(
            [gateway.send(i, ExecutorAPI.await_checkpoint, cut.dataflow, cut.ckpt, ids, timeout_s)
             for i, ids in sorted(cut.by_executor.items())], timeout_s=timeout_s + 30.0)
        written: dict[str, WrittenPart] = {}
        for part in answers:
            written.update(part or {})
        return written

    def commit(self, cut: Cut, written: dict[str, WrittenPart]) -> bool:
        """Complete `cut` if every part of it is written and the dataflow still runs on
        its placement: its manifest, then the news to the executors. False otherwise."""
        registry, name, placement = self.registry, cut.dataflow, cut.placement
        info = registry.dataflows[name]
        storage = registry.storage
        why = self._incomplete(cut, written)
        if why is not None:
            registry.checkpoint_failed(name, why, cut.ckpt, time.monotonic() - cut.started)
            return False
        assert storage is not None  # _incomplete said so
        positions = {a: part.positions for a, part in written.items() if a in cut.sources}
        size = sum(part.nbytes for part in written.values())
        deployment = info["deployment"]
        storage.commit(name, deployment, cut.ckpt, {
            "parts": {a: part.path for a, part in written.items()},
            "bases": {a: part.bases for a, part in written.items() if part.bases},
            "positions": positions, "placement": placement.to_dict(), "spec": info["spec"],
            "bytes": size})
        storage.retire(name, deployment, self.config.checkpoints_kept)
        # The sources' ingress logs go only up to the oldest checkpoint kept: recovery
        # may fall back to it when a newer one is damaged.
        kept = [m for _, m, _ in storage.restorable(name, deployment) if m is not None]
        self.pool.gateway.call_each(sorted(cut.by_executor), ExecutorAPI.checkpointed, name, cut.ckpt,
                                    kept[-1].get("positions", {}) if kept else {})
        registry.checkpointed(name, cut.ckpt, time.monotonic() - cut.started,
                              {a: (placement.hosts[a], part.nbytes, bool(part.bases))
                               for a, part in written.items()},
                              phases_of([getattr(p, "times", {}) for p in written.values()]))
        return True

    def _incomplete(self, cut: Cut, written: dict[str, WrittenPart]) -> str | None:
        """Why `cut` cannot complete (None: it can)."""
        info = self.registry.dataflows[cut.dataflow]
        if info["state"] not in (RUNNING, FINISHING) or info["released"]:
            return f"the dataflow became {info['state']} meanwhile"
        if self.registry.placements.get(cut.dataflow) is not cut.placement:
            return "its placement changed meanwhile (a migration or a restore)"
        if self.registry.storage is None:
            return "no checkpoint storage"
        missing = sorted(set(cut.placement.hosts) - set(written))
        if missing or len(written) != len(cut.placement.hosts):
            executors = sorted({cut.placement.hosts[a] for a in missing})
            return (f"{len(missing)} of {len(cut.placement.hosts)} parts not written in time "
                    f"(executors {executors})")
        return None

    @serves(ControllerAPI.checkpoint_now)
    def now(self, names: Sequence[str] | None = None,
            timeout_s: float = CALL_TIMEOUT_S) -> dict[str, bool]:
        """Checkpoint these dataflows (every live one with checkpoints, by default) now, in
        parallel; returns which completed (one still under way after `timeout_s` did not)."""
        wanted = [d["name"] for d in self.registry.named((RUNNING, FINISHING))
                  if (names is None or d["name"] in names) and d["checkpoints"]["interval_s"] > 0]
        futures = {n: self._threads.submit(self._when_free, n) for n in wanted}
        done, _ = wait(futures.values(), timeout=timeout_s)
        return {n: f in done and f.result() for n, f in futures.items()}

    def _when_free(self, name: str) -> bool:
        """A checkpoint of `name` after the one under way (if any); none while paused
        (the checkpoint after the reconfiguration follows at once)."""
        with self._changed:
            if not self._changed.wait_for(lambda: name not in self.taking, CHECKPOINT_TIMEOUT_S) \
                    or name in self.paused:
                return False
            self.taking.add(name)
        try:
            return self.take(name)
        except Exception as e:
            self.registry.checkpoint_failed(name, f"{type(e).__name__}: {e}")
            logger.warning("checkpoint of %s failed: %s", name, e)
            return False
        finally:
            with self._changed:
                self._done(name)

    # -- what reconfiguration asks ------------------------------------------------------
    def pause(self, name: str) -> None:
        """No checkpoint of `name` starts until `resume`."""
        with self._changed:
            self.paused.add(name)

    def await_idle(self, name: str, timeout_s: float = CHECKPOINT_TIMEOUT_S) -> bool:
        """Wait for the checkpoint of `name` under way, if any; False at the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: name not in self.taking, timeout_s)

    def resume(self, name: str) -> None:
        """Checkpoints of `name` go on: the next one (of its new placement) at once."""
        with self._changed:
            self.paused.discard(name)
            self.due[name] = 0.0

    def soon(self, name: str) -> None:
        """The next checkpoint of `name` at the next tick, and `CATCH_UP_CHECKPOINTS` more
        at `CATCH_UP_S` after it (after its restore)."""
        with self._changed:
            self.due[name] = 0.0
            self.catching_up[name] = CATCH_UP_CHECKPOINTS

    def schedule(self, name: str, interval_s: float) -> None:
        """A new dataflow's first checkpoint: one interval from now."""
        self.due[name] = time.monotonic() + interval_s

    def forget(self, name: str) -> None:
        self.due.pop(name, None)
        self.catching_up.pop(name, None)
