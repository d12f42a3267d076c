"""The executor's side of checkpoints (`checkpoint.py`): its parts taken at barriers,
its sources' ingress logs, and restoring a dataflow from a checkpoint.

- *Start* (`checkpoint`): a barrier into each source's mailbox, with its
  positions; its ingress log starts a new segment.
- *Take* (`on_barrier`, `snapshot_step`, `record`): at each activation, the first
  barrier snapshots it (a window's state packed in bounded steps, the activation
  paused meanwhile) and goes on to every target; the messages of channels whose
  barrier is still to come are recorded; once every channel's barrier came (or its
  end of stream) and the snapshot is packed, the part goes to storage (`Persist`).
- *Complete* (`checkpointed`): results before it become readable, the ingress
  log segments it covers go, and each activation's part there is what its next
  part may build on (incremental).
- *Restore* (`restore`, on activations just deployed again, then `resume`): each
  gets its state (its part and those it builds on) and its recorded messages
  first, each source its ingress log after its positions; all are held until
  every executor restored its part.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgpack

from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.columns import rows
from cameo_actors.runtime._private.checkpoint.parts import (
    CHECKPOINT,
    DELTA_SHARE,
    INDEX,
    INDEX_KEYS,
    MAX_DELTAS,
    SNAPSHOT,
    SNAPSHOT_ENTRIES,
    ChainRead,
    Content,
    Part,
    Recorded,
    incremental,
    interval_s,
)
from cameo_actors.runtime._private.exchange.epochs import MERGE, is_control
from cameo_actors.runtime._private.exchange.ingest import unpack_ingest
from cameo_actors.runtime._private.executor.source_log import IngressLog
from cameo_actors.scheduling import Message

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.egress import DataflowOutputs, Egress
    from cameo_actors.runtime._private.executor.flow import FlowControl
    from cameo_actors.runtime._private.executor.hosting import Hosting
    from cameo_actors.runtime._private.executor.ingress import Ingress
    from cameo_actors.runtime._private.executor.parts import MessagePath
    from cameo_actors.runtime._private.executor_api import MergedParts
    from cameo_actors.runtime.config import RuntimeConfig
    from cameo_actors.scheduling import Scheduler

#: Why a restored activation is held until every executor restored its part.
RESTORING = "restoring"
#: Hands a complete checkpoint part to storage: (dataflow, checkpoint, activation, its
#: content (`Content`: packed by the callee, off the worker thread), a source's positions
#: at the barrier, the stored parts it builds on (`Part.bases`)).
Persist = Callable[[str, int, str, Content, dict[str, int], list[str]], None]


class Checkpointing:
    """Checkpoint parts and ingress logs of one executor.

    Args:
        config: the pool's (checkpoint interval, ingress log folder, fsync).
        hosting, sched, flow, egress: the executor's parts this one reads and feeds (a
            sink's result log joins its part; restored activations are held).
        ingress: where a restore replays a source's ingress log.
        now_ms: the time now.
        path: the message path (the core), for barriers.
        persist: where a complete part goes; None: nowhere (a core alone in a test).
    """

    def __init__(self, config: RuntimeConfig, hosting: Hosting, sched: Scheduler,
                 flow: FlowControl, egress: Egress, ingress: Ingress,
                 now_ms: Callable[[], float], path: MessagePath,
                 persist: Persist | None = None) -> None:
        self.config = config
        self.hosting = hosting
        self.sched = sched
        self.flow = flow
        self.egress = egress
        self.ingress = ingress
        self.now_ms = now_ms
        self.path = path
        self.persist = persist
        #: source activation -> its write-ahead log (dataflows with checkpoints)
        self.ingress_logs: dict[str, IngressLog] = {}

    # -- ingress logs -----------------------------------------------------------------------
    def open_logs(self, spec: DataflowSpec, built: list[Activation], deployment: str) -> None:
        """An ingress log for each source of `built`, if the dataflow takes checkpoints."""
        folder = self.config.ingress_log_dir
        if folder and interval_s(spec, self.config) > 0:
            for act in built:
                if act.is_source:
                    self.ingress_logs[act.id] = IngressLog(
                        os.path.join(folder, spec.name, deployment or "_", quote(act.id, safe="")),
                        fsync=self.config.ingress_fsync)

    def close_logs(self, ids: list[str], keep: bool) -> None:
        """The activations `ids` are gone: their logs close, and are deleted unless `keep`
        (the dataflow is being restored from them)."""
        for aid in ids:
            log = self.ingress_logs.pop(aid, None)
            if log is not None:
                log.close() if keep else log.drop()

    # -- taking a checkpoint ------------------------------------------------------------------
    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        """Start checkpoint `ckpt` at the sources of `dataflow` hosted here: a barrier first
        in each one's mailbox, ahead of the messages there (`on_barrier` records them).
        Returns how many."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        now = self.now_ms()
        n = 0
        for aid in hosted.ids:
            act = self.hosting.activations[aid]
            if act.is_source:
                self.path.control(hosted.spec, aid, [CHECKPOINT, ckpt, dict(act.positions)], now,
                                  first=True)
                log = self.ingress_logs.get(aid)
                if log is not None:  # the calls before this cut can go once it completes
                    log.roll()
                n += 1
        return n

    def on_barrier(self, act: Activation, msg: Message) -> None:
        """A checkpoint barrier on one input channel (the first one: snapshot, and the
        barrier on to every target)."""
        ckpt = msg.payload[1]
        part = act.part
        channel = (msg.port, msg.upstream)
        if part is None or part.ckpt < ckpt:
            chain, act.chain = act.chain, None  # confirmed again when this one completes
            # A source's barrier overtakes its mailbox: every call before its positions now
            # is in its state or in the mailbox, whose messages the part records.
            positions = dict(act.positions) if act.is_source else {}
            head = act.begin_snapshot(positions, self._incremental(act, chain))
            part = act.part = Part(ckpt, b"", act.input_channels() - {channel}, head=head,
                                   positions=positions,
                                   bases=list(chain or ()) if head["operator"].get("delta")
                                   else [])
            if act.is_source:
                part.inflight = self._overtaken(act)
            # The barrier carries when it was put in its source's mailbox (its ingest time).
            part.times["begun"] = msg.ctx.ingest_ms
            part.times["barriers"] = now = self.now_ms()
            if not part.pending:
                part.times["aligned"] = now
            if act.is_sink:
                part.results = self.egress.dataflows[act.dataflow].results[act.id].snapshot(ckpt)
            for target, port in act.watermark_targets():
                self.path.route(act.id, self.sched.derive(msg, target, [CHECKPOINT, ckpt], now,
                                                          port=port, is_watermark=True))
            self.snapshot_step(act, msg)
            return
        if part.ckpt == ckpt:
            self._arrived(part, channel)
        self._part_done(act)

    def _overtaken(self, act: Activation) -> list[Recorded]:
        """The messages a source's barrier overtook in its mailbox, recorded with its part:
        a restore runs them first, then the ingress log after the positions. So the
        barrier leaves at once, not behind a backlog (after a restore, the whole replay:
        the checkpoint that exactly-once results wait for took 2.4 s, 2.2 s of it
        behind the replay, at 4,000 keys on rocksdb). Control steps are not input."""
        return [(m.port, m.upstream, m.is_watermark, m.payload) for m in self.sched.queued(act.id)
                if not (m.is_watermark and is_control(m.payload))]

    def _arrived(self, part: Part, channel: tuple[int, str]) -> None:
        """`channel`'s barrier (or its end) came: aligned once every channel's did."""
        if channel in part.pending:
            part.pending.discard(channel)
            if not part.pending:
                part.times["aligned"] = self.now_ms()

    def _incremental(self, act: Activation, chain: list[str] | None) -> bool:
        """Whether `act`'s part may hold only what changed since its last (`chain`: the
        stored parts its state is in, as of its part in the last completed checkpoint)."""
        full, deltas = act.chain_bytes
        return chain is not None and len(chain) <= MAX_DELTAS and deltas <= DELTA_SHARE * full \
            and incremental(self.hosting.dataflows[act.dataflow].spec, self.config)

    def snapshot_step(self, act: Activation, msg: Message) -> None:
        """One bounded step of packing `act`'s snapshot (at its first barrier, then a
        `SNAPSHOT` message to itself per step, first in its mailbox, with the barrier's
        priority: other activations' work runs between steps, nothing of its own, so its
        state stays as at the cut); once all is packed, its part may be done."""
        part = act.part
        if part is None or part.head is None:
            return
        if not act.operator.snapshot_step(SNAPSHOT_ENTRIES):
            now = self.now_ms()
            step = self.sched.derive(msg, act.id, [SNAPSHOT, part.ckpt], now, is_watermark=True)
            step.generation = act.generation
            self.sched.enqueue(step, now, first=True)
            return
        state = act.end_snapshot(part.head)
        part.pieces = state["operator"].pop("pieces", [])
        part.state = msgpack.packb(state, use_bin_type=True)
        part.head = None
        part.times["packed"] = self.now_ms()
        self._part_done(act)

    def index_step(self, act: Activation, msg: Message) -> None:
        """A bounded step of finding the bins of a restored activation's keys, or of
        warming a restored store's cache (the restore leaves that out, so the activation
        runs sooner), then the next as a message to itself, due as an event that came in
        now: the replay and the new input run between steps (with the restore's
        deadline, a store's warm-up of a million entries held them back 4 s)."""
        if act.operator.index_step(INDEX_KEYS):
            return
        now = self.now_ms()
        step = Message.ingress(act.id, [INDEX], dataflow=msg.ctx.dataflow, tenant=msg.ctx.tenant,
                               ingest_ms=now, is_watermark=True, size=0)
        step.generation = act.generation
        self.sched.enqueue(step, now)

    def record(self, act: Activation, msg: Message) -> None:
        """`msg`, about to run at `act` whose part has channels still to bring their
        barrier: recorded with the part if it came on one of those channels."""
        part = act.part
        if part is None or (msg.port, msg.upstream) not in part.pending:
            return
        if msg.is_watermark and is_control(msg.payload) and msg.payload[0] != MERGE:
            return  # a lessee's partials change state, like events; other control does not
        # Columns are kept as rows: the part is msgpack, and a replay runs rows as well.
        part.inflight.append((msg.port, msg.upstream, msg.is_watermark, rows(msg.payload)))
        if msg.is_watermark and not is_control(msg.payload) and msg.payload >= END_OF_STREAM:
            # no barrier will follow
            self._arrived(part, (msg.port, msg.upstream))
            self._part_done(act)

    def _part_done(self, act: Activation) -> None:
        part = act.part
        if part is not None and not part.pending and part.head is None and not part.written:
            content = part.take()  # packed by whoever writes it, not here
            if self.persist is not None:
                self.persist(act.dataflow, part.ckpt, act.id, content, part.positions,
                             part.bases)

    def checkpointed(self, dataflow: str, ckpt: int, positions: dict[str, dict[str, int]],
                     chains: dict[str, list[str]] | None = None) -> None:
        """Checkpoint `ckpt` of `dataflow` completed: results before it become readable,
        the ingress log segments before `positions` (source -> positions: those of the
        oldest checkpoint kept, which recovery may fall back to) go, and `chains`
        (activation -> the stored parts its state there is in: its part, after those it
        builds on) are what the activations' next parts may build on."""
        self.egress.checkpointed(dataflow, ckpt)
        for aid, pos in positions.items():
            log = self.ingress_logs.get(aid)
            if log is not None:
                log.retire(pos)
        for aid, chain in (chains or {}).items():
            act = self.hosting.activations.get(aid)
            part = act.part if act is not None else None
            if act is not None and part is not None and part.ckpt == ckpt and part.written:
                act.chain = list(chain)
                full, deltas = act.chain_bytes
                act.chain_bytes = (full, deltas + part.nbytes) if part.bases \
                    else (part.nbytes, 0)

    # -- restoring ----------------------------------------------------------------------------
    def restore(self, spec: DataflowSpec, ids: list[str], parts: dict[str, ChainRead],
                old: DataflowOutputs | None, chains: dict[str, list[str]] | None = None,
                merged: MergedParts | None = None) -> None:
        """Activations `ids` of `spec`, just deployed again, as checkpoint `parts`
        (activation -> its part, after the parts it builds on) has them, held until
        `resume`: their recorded in-flight messages first in each mailbox, then each
        source's ingress log after its positions. `parts` are unpacked already
        (`read_chain`, off this thread). `old`: the dataflow's outputs here
        before (its error output is kept, and commits made since the checkpoint).
        `chains`: where `parts` are stored (the same shape): what the activations' next
        parts may build on. `merged`: a Kafka source rescaled (`source_rescale`): a new
        instance takes the offsets of the old ones named, and runs the in-flight messages
        of those marked."""
        if old is not None:
            out = self.egress.dataflows[spec.name]
            out.errors, out.error_log, out.error_log_dropped = \
                old.errors, old.error_log, old.error_log_dropped
        now = self.now_ms()
        for aid in ids:
            act = self.hosting.activations[aid]
            self.flow.hold(aid, RESTORING)
            read = parts.get(aid)
            if read is None:
                continue
            part = read.part
            act.restore(part["state"])
            self.index_step(act, Message.ingress(aid, [INDEX], dataflow=spec.name,
                                                 tenant=spec.tenant, ingest_ms=now,
                                                 is_watermark=True, size=0))
            if chains and aid in chains:
                act.chain = list(chains[aid])
                act.chain_bytes = (read.full_bytes, read.delta_bytes)
            if part["results"] is not None:
                results = self.egress.dataflows[spec.name].results[aid]
                results.restore(*part["results"])
                if old is not None and aid in old.results:  # commits made since the checkpoint
                    results.commit(min(old.results[aid].committed_offset, results.end_offset))
            self._replay(spec, aid, part["inflight"], now)
        for aid, sources in (merged or {}).items():
            taker = self.hosting.activations.get(aid)
            for source, runs_inflight in sources if taker is not None else ():
                read = parts.get(source)
                if read is not None and taker is not None:
                    # The furthest of each: a part may hold others' older ones, taken in
                    # at a rescale before.
                    for key, at in read.part["state"]["positions"].items():
                        taker.positions[key] = max(at, taker.positions.get(key, at))
                    if runs_inflight:
                        self._replay(spec, aid, read.part["inflight"], now)
        for aid in ids:
            log = self.ingress_logs.get(aid)
            act = self.hosting.activations[aid]
            if log is not None:
                positions = act.positions
                for client, seq, blob in log.records():
                    if seq >= positions.get(client, 0):  # those before are in the state
                        self.ingress.ingest(client, seq, aid, unpack_ingest(blob, act.step.id),
                                            now)

    def _replay(self, spec: DataflowSpec, aid: str, inflight: list[Any], now: float) -> None:
        """A part's in-flight messages into `aid`'s mailbox, first."""
        for port, upstream, is_wm, payload in inflight:
            # Size 0: the credits of these were returned before the failure.
            msg = Message.ingress(aid, payload, dataflow=spec.name, tenant=spec.tenant,
                                  ingest_ms=now, port=port, is_watermark=is_wm, size=0)
            msg.upstream = upstream
            self.sched.enqueue(msg, now)

    def resume(self, dataflow: str) -> None:
        """Every executor restored its part of `dataflow`: its activations run again."""
        for aid in self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []:
            self.flow.release(aid, RESTORING)
