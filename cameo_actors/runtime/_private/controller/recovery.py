"""Recovery: executors watched, and what a lost one hosted restored.

An executor that died is restarted by the platform as a new incarnation; the
dataflows it hosted are `recovering` meanwhile (the others never stop) and are then
restored from their last completed checkpoints, their inputs replayed from the
sources' ingress logs. An executor that dies during a restore is waited for and the
restore tried again. One that does not come back within `recovery_timeout_s` fails
its dataflows. A controller that restarts adopts the executors that live.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError, ReconfigConflict, ReconfigError
from cameo_actors.runtime._private.checkpoint.parts import interval_s, part_chains
from cameo_actors.runtime._private.checkpoint.storage import CheckpointDamaged
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.gateway import Spawn, in_thread
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller.source_rescale import rescaled
from cameo_actors.runtime._private.executor_api import ExecutorAPI, MergedParts, Placed
from cameo_actors.runtime._private.placement import Placement, moved_off
from cameo_actors.runtime._private.process_watch import ProcessWatch
from cameo_actors.runtime.boundary import LIVE_STATES, RECOVERING, NodeDrained, RestoreSummary
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import RuntimeUnavailable
from cameo_actors.runtime.interface import ControlAPI, serves

logger = logging.getLogger(__name__)
#: How long one liveness round waits for the executors' answers.
PING_WAIT_S = 10.0
#: How often the executors are asked whether they live (at most: `monitor_interval_s`
#: if shorter). Ray tells a caller that an executor died about 1.3 s after its process
#: did (here); asking once a second added up to one more second to every recovery, for
#: a call answered in well under a millisecond by the executor's own threads.
WATCH_INTERVAL_S = 0.2


def short_cause(e: BaseException) -> str:
    """The first line of an error (the platform's death notices run to many lines)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


class Recovery:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry,
                 checkpoints: CheckpointCoordinator, stopped: threading.Event,
                 spawn: Spawn = in_thread) -> None:
        self.config, self.pool, self.registry, self.stopped = config, pool, registry, stopped
        self.checkpoints = checkpoints
        self.spawn = spawn
        self.lock = pool.lock
        #: dataflows a thread restores now; how many times each lost a part (a loss during
        #: a restore makes it try again)
        self.restoring: set[str] = set()
        #: lost executors whose restart thread restores what they hosted once it linked
        #: them (`_restart`): a restore that needs one leaves the work to that thread
        self.relinking: set[int] = set()
        self.losses: Counter[str] = Counter()
        #: dataflows whose next restore gives a Kafka source another parallelism
        #: (`rescale`): name -> (step, parallelism)
        self.rescales: dict[str, tuple[str, int]] = {}
        #: the processes of executors on this host, whose exits are known at once
        self.processes = ProcessWatch(self._exited)

    # -- watching --------------------------------------------------------------------------
    def watch(self, stopped: threading.Event) -> None:
        """The executors' liveness, every `WATCH_INTERVAL_S` (a loop of its own: the
        monitor's slower checks never delay it)."""
        interval = min(WATCH_INTERVAL_S, self.config.monitor_interval_s)
        while not stopped.wait(interval):
            try:
                self.check_executors()
            except Exception:  # a bug here must not stop the watch
                logger.exception("controller: the executors' watch failed")

    def check_executors(self) -> None:
        """Ask every executor that should answer; one gone or restarted is lost."""
        pool, gateway = self.pool, self.pool.gateway
        with self.lock:
            asked = {i: pool.incarnations[i] for i in pool.answering()}
        answers = gateway.poll(gateway.send_all(list(asked), ExecutorAPI.ping), PING_WAIT_S)
        for (i, known), answer in zip(asked.items(), answers, strict=True):
            if pool.incarnations.get(i) != known or i in pool.restarting:
                continue  # lost and restarted meanwhile (an answer of before is stale)
            if isinstance(answer, BaseException):
                self.lost(i, short_cause(answer))
            elif answer is not None and answer.incarnation != known:
                self.lost(i, "it was restarted")
            elif answer is not None:
                self.processes.watch(i, known, getattr(answer, "process", ""))

    def _exited(self, index: int, incarnation: str, pid: int) -> None:
        """The watched process of executor `index` as `incarnation` exited: lost, unless
        that was meant (the pool stops, the executor is being removed or was taken out)
        or it is known already (lost, maybe back as another incarnation)."""
        pool = self.pool
        with self.lock:
            if self.stopped.is_set() or pool.incarnations.get(index) != incarnation \
                    or index not in pool.answering() or index in pool.draining:
                return
        self.lost(index, f"its process (pid {pid}) exited")

    def lost(self, index: int, cause: str) -> None:
        """Executor `index` died: its dataflows are `recovering` until it was restarted
        and they are restored there from their last checkpoints."""
        why = f"executor {index} died: {cause}"
        with self.lock:
            if index in self.pool.restarting:
                return
            self.pool.restarting.add(index)
            logger.error("%s", why)
            hit = [d["name"] for d in self.registry.named(LIVE_STATES)
                   if not d["released"] and index in d["executors"]]
            for name in hit:
                self.mark(name, why)
            spare = self.pool.spare(index) if hit else None
            if spare is None:
                self.relinking.add(index)
        if spare is None:
            self.spawn(f"cameo-restart-{index}", self._restart, index, why, hit)
            return
        # A warm spare takes its instances now; the lost one, once restarted, is a spare.
        logger.warning("executor %d replaced by spare executor %d", index, spare)
        self.spawn(f"cameo-replace-{index}", self._replace, index, why, hit)
        self.spawn(f"cameo-rejoin-{index}", self._rejoin, index)

    def _replace(self, index: int, why: str, hit: list[str]) -> None:
        """Restore `hit` with lost executor `index`'s instances on its spare."""
        try:
            self.recover_all(hit, why)
        finally:
            with self.lock:
                self.pool.replaced.pop(index, None)
                self._spare_again(index)

    def _spare_again(self, index: int) -> None:
        """A replaced executor is a spare once it is back and its dataflows restored
        elsewhere (under the lock; whichever of the two comes last)."""
        pool = self.pool
        if index not in pool.restarting and index not in pool.dead \
                and index not in pool.replaced and not pool.load.get(index):
            pool.standby.add(index)

    def _rejoin(self, index: int) -> None:
        """Wait for lost executor `index` to be restarted (empty), link it to the others,
        and keep it as a spare (or take it out, as `_restart` does, if it does not come
        back)."""
        pool, gateway = self.pool, self.pool.gateway
        deadline = time.time() + self.config.recovery_timeout_s
        while time.time() < deadline and not self.stopped.is_set():
            answer = gateway.poll([gateway.send(index, ExecutorAPI.ping)], 5.0)[0]
            if answer is None or isinstance(answer, BaseException):
                time.sleep(0.1)
                continue
            try:
                with self.lock:
                    pool.incarnations[index] = answer.incarnation
                    gateway.link([index], pool.incarnations)
                    gateway.relink([i for i in pool.live() if i != index], index,
                                   answer.incarnation)
                    pool.restarting.discard(index)
                    self._spare_again(index)
                return
            except RuntimeUnavailable as e:
                logger.warning("executor %d: linking its incarnation %s failed (%s); waiting "
                               "for the next one", index, answer.incarnation, e)
                time.sleep(0.1)
        with self.lock:
            self._take_out([index], "it was replaced by a spare, and not restarted within "
                                    f"{self.config.recovery_timeout_s:g} s")

    def mark(self, name: str, why: str) -> None:
        self.losses[name] += 1
        self.registry.mark_recovering(self.registry.dataflows[name], why)

    def _restart(self, index: int, why: str, hit: list[str]) -> None:
        """Wait for executor `index` to be restarted (on any node with room), link it to
        the others, then restore the dataflows it hosted. One not back within
        `replace_lost_after_s` (its node died, no other has room) is retired and its
        dataflows restored on the executors left; with none left, they fail once
        `recovery_timeout_s` has passed."""
        pool, gateway = self.pool, self.pool.gateway
        began = time.time()
        deadline = began + self.config.recovery_timeout_s
        while True:
            incarnation = None
            while incarnation is None and time.time() < deadline and not self.stopped.is_set():
                answer = gateway.poll([gateway.send(index, ExecutorAPI.ping)], 5.0)[0]
                if answer is not None and not isinstance(answer, BaseException):
                    incarnation = answer.incarnation
                elif time.time() - began >= self.config.replace_lost_after_s and \
                        self._retire(index, why):
                    self.recover_all(hit, why)
                    return
                else:  # still restarting
                    time.sleep(0.1)
            if incarnation is None:
                with self.lock:
                    pool.dead[index] = f"{why}; it was not restarted within " \
                                       f"{self.config.recovery_timeout_s:g} s"
                    pool.restarting.discard(index)
                    self.relinking.discard(index)
                for name in hit:
                    self.registry.fail(name, pool.dead[index], lost=True)
                return
            try:
                with self.lock:
                    pool.incarnations[index] = incarnation
                    others = [i for i in pool.live() if i != index]
                    gateway.link([index], pool.incarnations)
                    gateway.relink(others, index, incarnation)
                    pool.restarting.discard(index)
                    self.relinking.discard(index)  # its restores go on below
                break
            except RuntimeUnavailable as e:
                # It (or a peer) died again between answering and being linked (a chaos
                # test kills executors back to back): link its next incarnation, as the
                # first, rather than leave its dataflows recovering for good.
                logger.warning("executor %d: linking its incarnation %s failed (%s); waiting "
                               "for the next one", index, incarnation, e)
                time.sleep(0.1)
        self.recover_all(hit, why)

    def _retire(self, index: int, why: str) -> bool:
        """Take executor `index` out of the pool for good, if others are left to take its
        instances (the next restores move them there); False if none is."""
        with self.lock:
            if not self._left([index]):
                return False
            self._take_out([index], f"{why}; it was not restarted within "
                                    f"{self.config.replace_lost_after_s:g} s: its instances "
                                    "were restored on the executors left")
        logger.error("executor %d retired: %s", index, self.pool.dead[index])
        return True

    def _left(self, leaving: list[int]) -> list[int]:
        """The executors that can take work now, but `leaving` (under the lock)."""
        return [i for i in self.pool.usable()
                if i not in leaving and i not in self.pool.restarting]

    def _take_out(self, indices: list[int], why: str) -> None:
        """Executors out of the pool for good (under the lock): ended, so that Ray never
        starts them again, empty; the next restores move their instances (`placement_of`)."""
        for i in indices:
            self.pool.dead[i] = why
            self.pool.restarting.discard(i)
            self.relinking.discard(i)
            self.pool.gateway.kill(i)

    # -- a node leaving on purpose -----------------------------------------------------------
    @serves(ControlAPI.drain_node)
    def drain(self, node: str, *, timeout_s: float | None = None) -> NodeDrained:
        """Take the executors on `node` (an address, or a node id or its first 8+ hex
        digits) out of the pool before the node goes: each dataflow with instances there
        is checkpointed now, the executors are retired, and the dataflows restored on the
        executors left from those checkpoints (only the events taken in since are
        replayed). The node is drained at Ray too: nothing new is placed there, and it
        leaves Ray once idle. Returns {"node", "executors", "dataflows", "ray_refused"
        (node id -> why Ray did not drain it), "seconds"}.

        Raises:
            ReconfigError: no live executor is on that node.
            ReconfigConflict: no executor would be left, or a dataflow there takes no
                checkpoints (nothing changed).
        """
        began = time.time()
        stats = {e["executor"]: e for e in self.pool.stats() if "address" in e}
        on = sorted(i for i, e in stats.items() if node and (
            e["address"] == node or (len(node) >= 8 and str(e.get("node", "")).startswith(node))))
        if not on:
            nodes = sorted({e["address"] for e in stats.values()})
            raise ReconfigError("pool drain", f"the address or node id of a node hosting "
                                f"executors, one of {nodes}", node, "see `cameo executors`")
        why = f"node {node} drained: executor(s) {on} retired"
        with self.lock:
            left = self._left(on)
            if not left:
                raise ReconfigConflict("pool drain", "executors on other nodes to move to",
                                       f"every usable executor on {node}",
                                       "add executors elsewhere first (`cameo pool add`)")
            hit = [d["name"] for d in self.registry.named(LIVE_STATES)
                   if not d["released"] and set(d["executors"]) & set(on)]
            unsaved = [n for n in hit if self.registry.dataflows[n]["checkpoints"]["interval_s"] <= 0]
            if unsaved:
                raise ReconfigConflict("pool drain", "dataflows on the node that take "
                                       "checkpoints (they move through one)", unsaved,
                                       "cancel those dataflows, or deploy them again with "
                                       "checkpoints on, then drain the node")
        # Ray first, so that no executor is added or restarted there from now on.
        nodes = sorted({str(stats[i]["node"]) for i in on if stats[i].get("node")})
        refused = {n: no for n in nodes if (no := self.pool.gateway.drain_node(n, why))}
        if refused:
            logger.warning("Ray did not drain %s: new executors may still start there", refused)
        self.checkpoints.now(hit)  # the restores start from here: little to replay
        with self.lock:
            self._take_out(on, why)
            # One that ended meanwhile (cancelled, failed, finished) has nothing to restore.
            hit = [n for n in hit if (d := self.registry.dataflows.get(n)) is not None
                   and d["state"] in LIVE_STATES]
            for name in hit:
                self.mark(name, why)
        logger.warning("%s; restoring %s on executors %s", why, hit, left)
        self.recover_all(hit, why, timeout_s)
        return {"node": node, "executors": on, "dataflows": hit, "ray_refused": refused,
                "seconds": round(time.time() - began, 3)}

    def rescale(self, name: str, step: str, parallelism: int,
                timeout_s: float | None = None) -> str | None:
        """Give Kafka source `step` of `name` `parallelism` instances through a checkpoint
        (`source_rescale`): checkpointed now, then restored from it with the source's new
        instances, as after a loss. Returns once restored: None, or why the restore failed
        (the dataflow failed with it).

        Raises:
            ReconfigConflict: the checkpoint could not be taken, or the dataflow is being
                restored already (nothing changed).
        """
        why = f"source {step!r} rescaled to {parallelism} instance(s)"
        with self.lock:
            if name in self.restoring or name in self.rescales:
                raise ReconfigConflict(f"dataflow {name!r}", "a dataflow not being restored",
                                       "a restore under way", "wait for it, then retry")
        if not self.checkpoints.now([name]).get(name):
            raise ReconfigConflict(f"dataflow {name!r}", "a checkpoint taken now (the "
                                   "source rescales through it)", "none completed",
                                   "see its checkpoints (cameo status), then retry")
        with self.lock:
            info = self.registry.dataflows.get(name)
            if info is None or info["state"] not in LIVE_STATES:
                raise ReconfigConflict(f"dataflow {name!r}", "a live dataflow",
                                       info["state"] if info else "gone", "deploy it again")
            self.rescales[name] = (step, parallelism)
            self.mark(name, why)
        try:
            self.recover_all([name], why, timeout_s)
        finally:
            with self.lock:
                self.rescales.pop(name, None)
        info = self.registry.dataflows[name]
        return None if info["state"] in LIVE_STATES else str(info.get("error"))

    def placement_of(self, manifest: dict[str, Any]) -> Placement:
        """A checkpoint's placement, the instances of a lost executor a spare replaces
        moved to the spare, those of executors gone for good to the executors left
        (`routing.moved_off`)."""
        placement = Placement.from_dict(manifest["placement"])
        for lost, spare in dict(self.pool.replaced).items():
            placement = moved_off(placement, {lost}, [spare], {})
        gone = placement.executors() & set(self.pool.dead)
        if not gone:
            return placement
        return moved_off(placement, gone, self._left([]), dict(self.pool.load))

    # -- restoring -------------------------------------------------------------------------
    def recover_all(self, names: list[str], why: str, timeout_s: float | None = None) -> None:
        """Restore each of `names`. A part of the pool that dies meanwhile (a second
        executor killed during the restore) is waited for and the restore tried again,
        until `timeout_s` (None: `recovery_timeout_s`); one thread restores a dataflow at
        a time."""
        deadline = time.time() + (timeout_s or self.config.recovery_timeout_s)
        for name in names:
            with self.lock:
                if name in self.restoring:
                    continue  # that thread tries again once the pool is whole
                self.restoring.add(name)
            handed = False
            try:
                attempt = 0
                while not self._recover(name, why, again=attempt > 0):
                    attempt += 1
                    handed = self._hand_over(name)
                    if handed:
                        break
                    if not self._await_pool(deadline):
                        raise RuntimeUnavailable(f"a part of the pool died again during "
                                                 f"the restore, {attempt} times")
            except Exception as e:
                logger.exception("recovering %s failed", name)
                self.registry.fail(name, f"{why}; restoring it failed: {short_cause(e)}",
                                   lost=True)
            finally:
                if not handed:
                    with self.lock:
                        self.restoring.discard(name)

    def _hand_over(self, name: str) -> bool:
        """Whether an executor of `name` is restarting and its restart thread restores
        `name` once it linked it (`_restart`, `relinking`): this thread then leaves the
        restore to that one, released under the lock that thread takes before it looks
        (no wait here, and no restore on an executor not linked yet)."""
        with self.lock:
            info = self.registry.dataflows.get(name)
            if info is None or not set(info["executors"]) & self.relinking:
                return False
            self.restoring.discard(name)
            return True

    def _await_pool(self, deadline: float) -> bool:
        """Wait until no executor is restarting, noticing restarts the watch has not
        noticed yet; False at `deadline`."""
        while time.time() < deadline and not self.stopped.is_set():
            self.check_executors()
            with self.lock:
                if not self.pool.restarting:
                    return True
            time.sleep(0.2)
        return False

    def _recover(self, name: str, why: str, again: bool = False) -> bool:
        """Restore `name` on its executors from its newest undamaged checkpoint, its inputs
        replayed from the sources' ingress logs after it. False if a part of the pool
        died meanwhile (`again`: the same loss, tried once more)."""
        registry, gateway = self.registry, self.pool.gateway
        info = registry.dataflows[name]
        if info["state"] != RECOVERING:
            return True
        losses = self.losses[name]
        spec = DataflowSpec.from_dict(info["spec"])
        if registry.storage is None or interval_s(spec, self.config) <= 0:
            registry.fail(name, f"{why}; it has no checkpoint to restore (checkpoints off: "
                                "fault_tolerance.checkpoint_interval_ms is 0)", lost=True)
            return True
        began = time.time()
        found = self._fetch(name, info["deployment"])
        if found is None:
            return False
        manifest, placement, skipped, (read_bytes, local_bytes) = found
        read = time.time()
        if manifest is None or placement is None:
            registry.fail(name, f"{why}; no checkpoint of it can be restored"
                                f"{': ' + '; '.join(skipped) if skipped else ''}", lost=True)
            return True
        generation, in_a_row = registry.restore_started(info, again)  # a new one per attempt
        if in_a_row > self.config.max_recoveries:
            registry.fail(name, f"{why}; it was restored {in_a_row - 1} times in a row "
                                "without a checkpoint completing in between (an event that "
                                "crashes its executor?). Fix: see its error output and "
                                "exceptions, then deploy it again", lost=True)
            return True
        # The checkpoint's steps (their parallelism) and placement, today's target and weight.
        restored = {**manifest["spec"], "latency_target_ms": info["spec"]["latency_target_ms"],
                    "scheduling": info["spec"]["scheduling"]}
        merged: MergedParts = {}
        if name in self.rescales:
            executors = self.pool.usable() if self.config.isolation == "shared" \
                else sorted(placement.executors())
            restored, placement, merged = rescaled(restored, placement, *self.rescales[name],
                                                   executors)
        before = registry.placements.get(name)
        left = set(before.executors()) - placement.executors() if before else set()
        gateway.call_each([i for i in sorted(left) if i not in self.pool.dead
                           and i not in self.pool.restarting], ExecutorAPI.cancel, name)
        involved = sorted(placement.executors())
        timeout = self.config.recovery_timeout_s
        try:
            placed = Placed(restored, placement, info["deployment"], generation, merged)
            gateway.gather(gateway.send_all(involved, ExecutorAPI.restore, placed,
                                            part_chains(manifest)), timeout)
            gateway.gather(gateway.send_all(involved, ExecutorAPI.resume, name), timeout)
        except RuntimeUnavailable as e:
            logger.warning("restoring %s: %s; trying again once the pool is whole", name, e)
            return False
        phases: RestoreSummary = {
            "checkpoint": manifest["checkpoint"],
            "waited_s": round(max(0.0, began - registry.recovering_since(info)), 3),
            "read_s": round(read - began, 3), "read_bytes": read_bytes,
            "read_local_bytes": local_bytes,
            "restored_s": round(time.time() - read, 3)}
        with self.lock:
            if self.losses[name] != losses:  # an executor of it died after its restore
                return False
            skipped_note = f" (skipped: {'; '.join(skipped)})" if skipped else ""
            registry.restored(info, restored, placement, phases, skipped_note)
        # Exactly-once results made since the restore are readable once a checkpoint after
        # them completes: the next one now (incremental, on the restored chains: cheap).
        self.checkpoints.soon(name)
        logger.warning("dataflow %s restored from checkpoint %s%s", name,
                       manifest["checkpoint"], skipped_note)
        return True

    def _fetch(self, name: str, deployment: str
               ) -> tuple[dict[str, Any] | None, Placement | None, list[str],
                          tuple[int, int]] | None:
        """The newest checkpoint of `name` whose manifest and parts are whole, and where
        it is restored (`placement_of`), its parts read by the executors that restore
        them; why each newer one was skipped (damaged); and the bytes read (all, and from
        local copies). None if a part of the pool died meanwhile, or an executor it goes
        to is restarting."""
        registry, gateway = self.registry, self.pool.gateway
        assert registry.storage is not None
        skipped: list[str] = []
        for ckpt, manifest, damage in registry.storage.restorable(name, deployment):
            if manifest is not None:
                placement = self.placement_of(manifest)
                if placement.executors() & self.pool.restarting:
                    # Back maybe, but not linked yet: restored there before its link, the
                    # others' messages to it would be dropped as meant for its old
                    # incarnation, and the link made after would reset the dataflow's.
                    return None
                try:
                    read = gateway.gather(gateway.send_all(
                        sorted(placement.executors()), ExecutorAPI.fetch, name, placement,
                        part_chains(manifest)), self.config.recovery_timeout_s)
                    return manifest, placement, skipped, (sum(r.read_bytes for r in read),
                                                          sum(r.local_bytes for r in read))
                except CheckpointDamaged as e:
                    damage = str(e)
                except RuntimeUnavailable as e:
                    logger.warning("reading %s's checkpoint %d: %s; trying again once the "
                                   "pool is whole", name, ckpt, e)
                    return None
            skipped.append(f"checkpoint {ckpt} is damaged: {damage}")
            logger.error("dataflow %s: checkpoint %d is damaged: %s", name, ckpt, damage)
        return None, None, skipped, (0, 0)

    # -- a controller that restarts ------------------------------------------------------
    def resume(self, saved: dict[str, Any]) -> None:
        """Go on from a saved registry: adopt the executors that live (their dataflows keep
        running), start new ones for those gone, and restore the dataflows that ran there."""
        pool, gateway, registry = self.pool, self.pool.gateway, self.registry
        registry.load(saved)
        known = {int(i): inc for i, inc in saved["incarnations"].items()}
        gone: set[int] = set()
        for i in range(saved["executors"]):
            inc = None
            if i in pool.dead:
                gateway.forget(i)
            elif gateway.adopt(i):
                try:
                    inc = gateway.gather([gateway.send(i, ExecutorAPI.ping)], 10.0)[0].incarnation
                except CameoError:
                    inc = None
            if inc is None:
                if i not in pool.dead:
                    gateway.start([i])
                gone.add(i)
            elif inc != known.get(i):
                gone.add(i)  # restarted meanwhile: empty
        pool.link()
        hit = [d["name"] for d in registry.named(LIVE_STATES) if set(d["executors"]) & gone]
        logger.warning("controller resumed pool %s: %d dataflow(s), %d to restore",
                       registry.pool_name, len(registry.dataflows), len(hit))
        for name in hit:
            self.mark(name, "the pool restarted")
        if hit:
            self.spawn("cameo-resume", self.recover_all, hit, "the pool restarted")
