"""The executor's logic, without Ray: one message path through parts with one job each.

One `ExecutorCore` is owned by one thread (the executor's worker thread); the
Ray actor around it (`executor.py`) hands it work through its `inbox`, so none
of its state needs a lock. The parts:

- `hosting`   the activations hosted here, and where every activation runs;
- `channels`  sequence numbers, in-order delivery, batching per destination;
- `flow`      credits per channel, held senders, backpressure at sources;
- `egress`    result logs and the error output, with offsets and commit;
- `stats`     counters, latency, and the reports of dataflows and the executor;
- `sched`     the two-level deadline scheduler (`cameo_actors.scheduling`).

Every part that keeps per-dataflow state implements `DataflowScoped`, so
deploy and cancel reach all of them the same way.

The message path, and where the live runtime's concerns plug in:

1. *Admit* (`ingest` from clients, `receive` from executors, `_route` for local
   hops): a message enters the scheduler. In-band control messages (routing
   epochs, migrated state, checkpoint barriers) are barriers in the mailbox,
   like watermarks. A source applies each client's ingest calls in order,
   once (`ingest`), after writing them to its ingress log (`ingress_log.py`).
2. *Execute* (`_execute`): the activation's operator runs on the message, or
   the activation on a control message (`Activation.on_control`: a table
   switch, a marker, a chunk of state to give or take; events of bins in
   flight wait in the activation). Trace records (start, end, which
   activation waited meanwhile) are taken here.
3. *Route* (`_route`): outputs go to their targets; the versioned routing
   table chooses a bin's owner (`Activation.split`).
4. *Acknowledge* (`_ack`, `_on_ack`): credits and Cameo's C_path feedback go
   back upstream.
Moving state is scheduled like any message (each chunk a message), so it runs
below due latency-sensitive work. The plan changes themselves (`prepare`,
`reroute`, `add_instances`, `retire`) come from the controller.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypedDict
from urllib.parse import quote

import msgpack

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import END_OF_STREAM, ErrorRecord, Output, short_repr
from cameo_actors.runtime._private.activation import Activation
from cameo_actors.runtime._private.channels import Channels, Send
from cameo_actors.runtime._private.checkpoint import (
    CHECKPOINT,
    Part,
    delivery,
    interval_s,
    unpack_part,
)
from cameo_actors.runtime._private.egress import Egress
from cameo_actors.runtime._private.flow import RESULTS_FULL, FlowControl
from cameo_actors.runtime._private.footprint import approx_bytes
from cameo_actors.runtime._private.hosting import Hosting
from cameo_actors.runtime._private.ingest import error_records, unpack_ingest
from cameo_actors.runtime._private.ingress_log import IngressLog
from cameo_actors.runtime._private.migration import MERGE, REROUTE, UNLEASE, is_control
from cameo_actors.runtime._private.routing import Placement
from cameo_actors.runtime._private.stats import Statistics
from cameo_actors.runtime._private.tracing import Egressed, make_tracer
from cameo_actors.runtime._private.wire import decode_message
from cameo_actors.runtime.boundary import DataflowPart, ExecutorStats
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.scheduling import Feedback, Message, Scheduler
from cameo_actors.tracing.records import DESERIALIZE, FROM_CLIENT, SERIALIZE, UNTRACED

#: A paced instance idle longer than this (ms) starts its simulated clock anew.
PACE_IDLE_MS = 5.0
#: Tracebacks of faults in the runtime itself kept for executor stats (never expected).
FAULTS_KEPT = 20
#: Why a restored activation is held until every executor restored its part.
RESTORING = "restoring"
#: Hands a complete checkpoint part to storage: (dataflow, checkpoint, activation, blob,
#: a source's positions at the barrier).
Persist = Callable[[str, int, str, bytes, dict[str, int]], None]


class DataflowWork(TypedDict):
    """What an executor still has to do for one dataflow (see `ExecutorCore.unsettled`):
    messages queued in its mailboxes, ingest calls parked until an earlier one came,
    instances in a migration epoch, activations held (credits, a full result log), the
    last batch sent to each other executor with its messages, and result rows waiting
    for a checkpoint before a reader sees them."""

    queued: int
    parked: int
    moving: int
    held: list[str]
    sent: dict[int, int]
    awaiting_checkpoint: int


class Unsettled(TypedDict):
    """An executor's `DataflowWork` per dataflow, and the batches it applied per sender."""

    dataflows: dict[str, DataflowWork]
    applied: dict[int, int]


class DataflowScoped(Protocol):
    """A part of the executor that keeps state per dataflow."""

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None: ...
    def close(self, dataflow: str, ids: list[str]) -> None: ...


class ExecutorCore:
    def __init__(self, index: int, config: RuntimeConfig, send: Send,
                 clock: Clock | None = None, persist: Persist | None = None) -> None:
        self.index = index
        self.config = config
        self.clock = clock or SystemClock()
        self.sched = Scheduler(config.policy, quantum_ms=config.quantum_ms,
                               policy_params=dict(config.policy_params),
                               floor_slack_ms=config.floor_slack_ms if config.tenant_floor else None)
        self.hosting = Hosting(index, FunctionResolver(config.allowed_modules),
                               max_string_chars=config.max_string_chars)
        self.channels = Channels(index, send, self._unsendable)
        self.flow = FlowControl(config.credit_events, config.ingress_events,
                                self.sched.hold, self.sched.release)
        self.egress = Egress(config.result_capacity,
                             hold=lambda sink: self.flow.hold(sink, RESULTS_FULL),
                             release=lambda sink: self.flow.release(sink, RESULTS_FULL),
                             state_budget_bytes=config.state_budget_bytes,
                             delivery=lambda spec: delivery(spec, config))
        self.stats = Statistics(index)
        self.tracer = make_tracer(index, config.trace_sample, config.trace_capacity)
        #: the traced activity running now (its outputs carry it), and the results it wrote
        self._trace = UNTRACED
        self._egressed: Egressed | None = None
        self._persist = persist
        #: source activation -> its write-ahead log (dataflows with checkpoints)
        self.ingress_logs: dict[str, IngressLog] = {}
        self._scoped: tuple[DataflowScoped, ...] = (self.flow, self.egress, self.stats)
        #: activation -> messages it sent to other executors since the last flush (the
        #: flush's encoding time is shared among them)
        self._unflushed: dict[Activation, int] = {}
        capacity = config.service_capacity_eps
        self._pace_ms = 1000.0 / capacity if capacity else 0.0
        # Work handed over by other threads, run by the owner thread.
        self.inbox: deque[Callable[[], None]] = deque()
        self.faults: deque[str] = deque(maxlen=FAULTS_KEPT)

    # == control (called on the owner thread) ======================================
    def deploy(self, spec: DataflowSpec, placement: Placement, deployment: str = "",
               generation: int = 0) -> list[str]:
        """Create the activations of `spec` that `placement` puts on this executor
        (`generation`: its restores so far)."""
        built = self.hosting.build(spec, placement)
        for act in built:
            act.generation = generation
        self.hosting.add(spec, placement, built)
        self.hosting.dataflows[spec.name].deployment = deployment
        for part in self._scoped:
            part.open(spec, built)
        for act in built:
            self._schedule(spec, act)
        folder = self.config.ingress_log_dir
        if folder and interval_s(spec, self.config) > 0:
            for act in built:
                if act.is_source:
                    self.ingress_logs[act.id] = IngressLog(
                        os.path.join(folder, spec.name, deployment or "_", quote(act.id, safe="")),
                        fsync=self.config.ingress_fsync)
        return [a.id for a in built]

    def _schedule(self, spec: DataflowSpec, act: Activation) -> None:
        self.sched.add_activation(act.id, dataflow=spec.name, tenant=spec.tenant,
                                  latency_target_ms=spec.latency_target_ms,
                                  weight=spec.scheduling.weight, window=act.window_timing)

    def cancel(self, dataflow: str, keep_logs: bool = False) -> int:
        """Free a dataflow's activations, queues, credits and buffers; returns messages
        dropped. Its ingress logs go too, unless `keep_logs` (it is being restored)."""
        hosted = self.hosting.remove(dataflow)
        if hosted is None:
            return 0
        dropped = sum(len(self.sched.remove_activation(aid)) for aid in hosted.ids)
        for part in self._scoped:
            part.close(dataflow, hosted.ids)
        self.channels.forget(dataflow)
        for aid in hosted.ids:
            log = self.ingress_logs.pop(aid, None)
            if log is not None:
                log.close() if keep_logs else log.drop()
        return dropped

    def update(self, dataflow: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> None:
        """Change a running dataflow's target or weight; new messages are stamped with it."""
        if latency_target_ms is not None:
            for aid in self.hosting.ids(dataflow):
                self.sched.profile(aid).latency_target_ms = float(latency_target_ms)
        if weight is not None:
            self.sched.set_weight(dataflow, weight)
        if latency_target_ms is not None:
            self.stats.dataflows[dataflow].latency.target_ms = float(latency_target_ms)

    # == changes of the physical plan (see migration.py) ================================
    def add_instances(self, spec: DataflowSpec, placement: Placement, new: list[str],
                      generation: int = 0, deployment: str = "") -> list[str]:
        """New instances of a keyed step: host those `placement` puts here, and make every
        hosted activation of the dataflow expect them (as an input channel, a target)."""
        made = self._host(spec, placement, new, generation, deployment)
        if made is None:
            return []
        by_id = {str(a): a for a in placement.instances}
        for aid in self.hosting.ids(spec.name):
            if aid in made:
                continue
            act = self.hosting.activations[aid]
            for n in new:
                step = by_id[n].step
                for port, up in enumerate(act.step.inputs):
                    if up == step:
                        act.add_channel(port, n)
                act.add_target(step, n)
        return sorted(made)

    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        """Tell the instances of `step` hosted here what routing version `version` moves;
        those that give bins start indexing their state (control messages to themselves)."""
        hosted = self.hosting.dataflows[dataflow]
        now = self.clock.now_ms()
        for aid in hosted.ids:
            act = self.hosting.activations[aid]
            if act.step.id == step:
                for target, _, payload in act.prepare(version, moves):
                    self._control(hosted.spec, target, payload, now)

    def reroute(self, dataflow: str, step: str, version: int, owners: list[int],
                instances: list[int]) -> int:
        """Switch the upstreams of `step` hosted here to table `version`, each at its own
        point in its input (a control message in its mailbox). Returns how many."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        inputs = set(hosted.spec.step(step).inputs)
        now = self.clock.now_ms()
        n = 0
        for aid in hosted.ids:
            act = self.hosting.activations[aid]
            if act.step.id in inputs:
                self._control(hosted.spec, aid, [REROUTE, step, version, list(owners),
                                                 list(instances)], now)
                n += 1
        return n

    def _control(self, spec: DataflowSpec, target: str, payload: list[Any], now: float) -> None:
        """A control message from the controller into `target`'s mailbox, a barrier there."""
        self.sched.enqueue(Message.ingress(target, payload, dataflow=spec.name, tenant=spec.tenant,
                                           ingest_ms=now, is_watermark=True), now)

    def retire(self, dataflow: str, ids: list[str]) -> list[str]:
        """Instances that gave away every bin: the end of their stream on every channel
        out, then they are gone (here, and from routing on every executor)."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return []
        now = self.clock.now_ms()
        for aid in ids:
            act = self.hosting.activations.get(aid)
            if act is not None and aid in hosted.ids:
                self._barriers(hosted.spec, aid, act.end_barriers(), now)
        here = self._unhost(dataflow, ids)
        gone = set(ids)
        for aid in hosted.ids:
            self.hosting.activations[aid].drop_targets(gone)
        return here

    # -- lessees (Dirigo, operators/lease.py) -------------------------------------------------
    def add_lessees(self, spec: DataflowSpec, placement: Placement, step: str, new: list[str],
                    generation: int = 0, deployment: str = "") -> list[str]:
        """Host the new lessees of `step` that `placement` puts here; the step's instances
        here take their partials, its upstreams here lend to them from their next event."""
        made = self._host(spec, placement, new, generation, deployment)
        if made is None:
            return []
        now = self.clock.now_ms()
        for aid in self.hosting.ids(spec.name):
            if aid not in made:
                self._barriers(spec, aid, self.hosting.activations[aid].add_lessees(step, new),
                               now)
        return sorted(made)

    def _host(self, spec: DataflowSpec, placement: Placement, new: list[str], generation: int,
              deployment: str) -> set[str] | None:
        """Host the activations of `new` that `placement` puts here (an executor new to the
        dataflow opens its parts); None if it has no part of the dataflow at all."""
        hosted = self.hosting.dataflows.get(spec.name)
        built = self.hosting.build(spec, placement, set(new))
        for act in built:
            act.generation = generation
        if hosted is None and not built:
            return None
        self.hosting.add(spec, placement, built)
        if hosted is None:
            self.hosting.dataflows[spec.name].deployment = deployment
            for part in self._scoped:
                part.open(spec, built)
        for act in built:
            self._schedule(spec, act)
        return {a.id for a in built}

    def _barriers(self, spec: DataflowSpec, sender: str, sends: list[Any], now: float) -> None:
        """Barriers (watermarks, control) an activation sends outside its message path."""
        if not sends:
            return
        parent = Message.ingress(sender, [], dataflow=spec.name, tenant=spec.tenant,
                                 ingest_ms=now, is_watermark=True)
        for target, port, payload in sends:
            self._route(sender, self.sched.derive(parent, target, payload, now, port=port,
                                                  is_watermark=True))

    def _unhost(self, dataflow: str, ids: list[str]) -> list[str]:
        """Activations gone from the dataflow: those hosted here stop (returned)."""
        here = self.hosting.forget(dataflow, ids)
        for aid in here:
            self.sched.remove_activation(aid)
        self.flow.close(dataflow, here)
        return here

    def unlease(self, dataflow: str, step: str, ids: list[str]) -> int:
        """Stop lending to lessees `ids` of `step`: each upstream here, at its point in its
        input, ends its stream to them; a lessee then sends its last partials and ends."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        now = self.clock.now_ms()
        n = 0
        for aid in hosted.ids:
            if any(r.step == step and r.lessees for r in self.hosting.activations[aid].routes):
                self._control(hosted.spec, aid, [UNLEASE, step, list(ids)], now)
                n += 1
        return n

    def lessees_ended(self, dataflow: str, ids: list[str]) -> bool:
        """Whether the lessees `ids` hosted here saw the end of every input and ran all,
        and the step's instances here got the end of their streams (their last partials
        are in: before it, a channel gone would let an owner's windows fire early)."""
        acts = self.hosting.activations
        if not all(acts[a].saw_end() and not self.sched.pending(a) for a in ids if a in acts):
            return False
        for aid in self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []:
            chans = acts[aid].channels[0]
            if any(chans.get(a, END_OF_STREAM) < END_OF_STREAM for a in ids):
                return False
        return True

    def drop_lessees(self, dataflow: str, ids: list[str]) -> list[str]:
        """Lessees that ended: gone from here and from every channel map."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return []
        here = self._unhost(dataflow, ids)
        gone = set(ids)
        for aid in hosted.ids:
            self.hosting.activations[aid].drop_lessees(gone)
        return here

    def end_migration(self, dataflow: str, step: str) -> None:
        """The migration of `step` is over: its instances here drop their key index."""
        for aid in self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []:
            act = self.hosting.activations[aid]
            if act.step.id == step:
                act.index, act.unindexed = None, []

    def epochs(self, dataflow: str, step: str) -> dict[str, dict[str, int]]:
        """Per instance of `step` here: the last routing version done, and bins and bytes
        it gave away."""
        out = {}
        for aid in self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []:
            act = self.hosting.activations[aid]
            if act.step.id == step:
                out[aid] = {"done": act.done_version, "bins_given": act.bins_given,
                            "bytes_sent": act.bytes_sent, "indexing": len(act.unindexed)}
        return out

    # == checkpoints and restoring (see checkpoint.py) ====================================
    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        """Start checkpoint `ckpt` at the sources of `dataflow` hosted here: a barrier in
        each one's mailbox with its positions now. Returns how many."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        now = self.clock.now_ms()
        n = 0
        for aid in hosted.ids:
            act = self.hosting.activations[aid]
            if act.is_source:
                self._control(hosted.spec, aid, [CHECKPOINT, ckpt, dict(act.positions)], now)
                log = self.ingress_logs.get(aid)
                if log is not None:  # the calls before this cut can go once it completes
                    log.roll()
                n += 1
        return n

    def _on_barrier(self, act: Activation, msg: Message) -> None:
        """A checkpoint barrier on one input channel (the first one: snapshot, and the
        barrier on to every target)."""
        ckpt = msg.payload[1]
        part = act.part
        channel = (msg.port, msg.upstream)
        if part is None or part.ckpt < ckpt:
            state = msgpack.packb(act.snapshot(msg.payload[2] if act.is_source else {}),
                                  use_bin_type=True)
            part = act.part = Part(ckpt, state, act.input_channels() - {channel},
                                   positions=dict(msg.payload[2]) if act.is_source else {})
            if act.is_sink:
                part.results = self.egress.dataflows[act.dataflow].results[act.id].snapshot(ckpt)
            now = self.clock.now_ms()
            for target, port in act.watermark_targets():
                self._route(act.id, self.sched.derive(msg, target, [CHECKPOINT, ckpt], now,
                                                      port=port, is_watermark=True))
        elif part.ckpt == ckpt:
            part.pending.discard(channel)
        self._part_done(act)

    def _record(self, act: Activation, part: Part, msg: Message) -> None:
        """A message on a channel whose barrier is still to come: part of the checkpoint."""
        part.inflight.append((msg.port, msg.upstream, msg.is_watermark, msg.payload))
        if msg.is_watermark and not is_control(msg.payload) and msg.payload >= END_OF_STREAM:
            # no barrier will follow
            part.pending.discard((msg.port, msg.upstream))
            self._part_done(act)

    def _part_done(self, act: Activation) -> None:
        part = act.part
        if part is not None and not part.pending and not part.written:
            part.written = True
            if self._persist is not None:
                self._persist(act.dataflow, part.ckpt, act.id, part.blob(), part.positions)
            part.state, part.inflight, part.results = b"", [], None  # handed over

    def checkpointed(self, dataflow: str, ckpt: int, positions: dict[str, dict[str, int]]) -> None:
        """Checkpoint `ckpt` of `dataflow` completed: results before it become readable,
        and the ingress log segments it covers go (`positions`: source -> positions)."""
        self.egress.checkpointed(dataflow, ckpt)
        for aid, pos in positions.items():
            log = self.ingress_logs.get(aid)
            if log is not None:
                log.retire(pos)

    def restore(self, spec: DataflowSpec, placement: Placement, deployment: str,
                parts: dict[str, bytes], generation: int) -> list[str]:
        """Deploy `spec` here again as checkpoint `parts` (activation -> its part) has it,
        held until `resume`: its recorded in-flight messages first in each mailbox, then
        each source's ingress log after its positions. Its error output here is kept."""
        old = self.egress.dataflows.get(spec.name)
        self.cancel(spec.name, keep_logs=True)
        ids = self.deploy(spec, placement, deployment, generation)
        if old is not None:
            out = self.egress.dataflows[spec.name]
            out.errors, out.error_log, out.error_log_dropped = \
                old.errors, old.error_log, old.error_log_dropped
        now = self.clock.now_ms()
        for aid in ids:
            act = self.hosting.activations[aid]
            self.flow.hold(aid, RESTORING)
            blob = parts.get(aid)
            if blob is None:
                continue
            part = unpack_part(blob)
            act.restore(part["state"])
            if part["results"] is not None:
                results = self.egress.dataflows[spec.name].results[aid]
                results.restore(*part["results"])
                if old is not None and aid in old.results:  # commits made since the checkpoint
                    results.commit(min(old.results[aid].committed_offset, results.end_offset))
            for port, upstream, is_wm, payload in part["inflight"]:
                # Size 0: the credits of these were returned before the failure.
                msg = Message.ingress(aid, payload, dataflow=spec.name, tenant=spec.tenant,
                                      ingest_ms=now, port=port, is_watermark=is_wm, size=0)
                msg.upstream = upstream
                self.sched.enqueue(msg, now)
        for aid in ids:
            log = self.ingress_logs.get(aid)
            act = self.hosting.activations[aid]
            if log is not None:
                for client, seq, blob in log.records():
                    self.ingest(client, seq, aid, unpack_ingest(blob, act.step.id), now)
        return ids

    def resume(self, dataflow: str) -> None:
        """Every executor restored its part of `dataflow`: its activations run again."""
        for aid in self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []:
            self.flow.release(aid, RESTORING)

    # == 1. admit ===================================================================
    def ingest(self, client: str, seq: int, target: str, items: list[Any], ingest_ms: float,
               deser_ms: float = 0.0) -> None:
        """Events (lists), watermarks (numbers) and the error records of events refused at
        the edge ({"errors": [...]}, see `ingest.py`) from a client's call `seq` to source
        `target`: applied in the client's order, once (a call resent after a failure, or
        replayed from the ingress log, that was applied already is dropped)."""
        act = self.hosting.activations.get(target)
        if act is None:
            return  # cancelled meanwhile
        act.deser_ms += deser_ms
        nxt = act.positions.get(client, 0)
        if seq != nxt:
            if seq > nxt:  # early: Ray may reorder calls
                act.parked.setdefault(client, {})[seq] = (items, ingest_ms)
            return
        self._ingest_now(act, items, ingest_ms)
        seq += 1
        parked = act.parked.get(client)
        while parked and seq in parked:
            self._ingest_now(act, *parked.pop(seq))
            seq += 1
        if parked is not None and not parked:
            del act.parked[client]
        act.positions[client] = seq

    def _ingest_now(self, act: Activation, items: list[Any], ingest_ms: float) -> None:
        target = act.id
        spec = self.hosting.dataflows[act.dataflow].spec
        counters = self.stats.dataflows[act.dataflow]
        tf = getattr(act.operator, "event_time", None)  # sources know their event-time field
        now = self.clock.now_ms()
        cut = self.config.max_message_events
        tracer = self.tracer
        for item in items:
            if isinstance(item, dict):  # events msgpack could not carry: the error output
                self.egress.errors(act.dataflow, error_records(item), ingest_ms, now)
                continue
            if not isinstance(item, list):  # a watermark
                wm = Message.ingress(target, float(item), dataflow=spec.name, tenant=spec.tenant,
                                     ingest_ms=ingest_ms, is_watermark=True)
                if tracer is not None and tracer.sampled():
                    wm.trace = FROM_CLIENT
                self.sched.enqueue(wm, now)
                continue
            for i in range(0, len(item), cut):
                part = item[i:i + cut]
                msg = Message.ingress(target, part, dataflow=spec.name, tenant=spec.tenant,
                                      ingest_ms=ingest_ms, event_ms=_max_time(part, tf), size=len(part))
                if tracer is not None and tracer.sampled():
                    msg.trace = FROM_CLIENT
                counters.events_in += len(part)
                act.events_arrived += len(part)
                self.flow.admitted(target, len(part))
                self.sched.enqueue(msg, now)

    def receive(self, blob: bytes) -> None:
        """A batch from another executor; applied in the sender's order. Its decoding
        time is shared among the activations its messages are for (useful time)."""
        start = self.clock.now_ms()
        got: list[Activation] = []
        self.channels.from_executor(blob, lambda msgs, acks: self._apply_batch(msgs, acks, got))
        end = self.clock.now_ms()
        if got:
            share = (end - start) / len(got)
            for act in got:
                act.deser_ms += share
        if self.tracer is not None:
            self.tracer.transfer(DESERIALIZE, start, end)

    def _apply_batch(self, messages: list[Any], acks: list[Any], got: list[Activation]) -> None:
        now = self.clock.now_ms()
        activations = self.hosting.activations
        for t in messages:
            msg = decode_message(t)
            act = activations.get(msg.target)
            if act is None:  # cancelled meanwhile: return the credits all the same
                self._ack(msg.upstream, msg.target, msg.size, 0.0)
            elif act.generation == msg.generation:
                self.sched.enqueue(msg, now)
                act.events_arrived += msg.size
                got.append(act)
            # else: sent by a run the dataflow was restored from since: its sender is gone
        for up, down, n, path_cost in acks:
            self._on_ack(up, down, n, path_cost)

    # == 2. execute (the owner thread's loop) ==========================================
    def drain_inbox(self) -> None:
        inbox = self.inbox
        while inbox:
            inbox.popleft()()

    def run_slice(self) -> bool:
        """Run one scheduling slice; False if there was nothing to run."""
        return self.sched.run_once(self._execute, self.clock, poll=self.drain_inbox) is not None

    def _execute(self, aid: str, msg: Message) -> None:
        tracer = self.tracer
        if tracer is None or msg.trace < 0:
            self._execute_message(aid, msg)
            return
        # Traced: the activity is recorded, and what it sends carries its id (`_route`).
        act = self.hosting.activations[aid]
        start = self.clock.now_ms()
        self._trace = tid = tracer.next_id()
        self._egressed = None
        try:
            self._execute_message(aid, msg)
        finally:
            self._trace = UNTRACED
            tracer.process(tid, act.dataflow, act.step.id, aid, msg, start, self.clock.now_ms(),
                           self._egressed)

    def _execute_message(self, aid: str, msg: Message) -> None:
        act = self.hosting.activations[aid]
        part = act.part
        if part is not None and part.pending and (msg.port, msg.upstream) in part.pending \
                and not (msg.is_watermark and is_control(msg.payload) and msg.payload[0] != MERGE):
            self._record(act, part, msg)  # a lessee's partials change state, like events
        try:
            if msg.is_watermark:
                if is_control(msg.payload) and msg.payload[0] == CHECKPOINT:
                    self._on_barrier(act, msg)
                    out = Output()
                elif is_control(msg.payload):
                    out, barriers = act.on_control(msg.payload, msg.port, msg.upstream)
                    now = self.clock.now_ms()
                    for target, port, payload in barriers:
                        self._route(aid, self.sched.derive(msg, target, payload, now, port=port,
                                                           is_watermark=True))
                else:
                    out = act.on_watermark(msg.payload, msg.port, msg.upstream)
            else:
                act.events_in += len(msg.payload)
                began = self.clock.now_ms() if self._pace_ms else 0.0
                out = act.on_data(msg.payload, msg.port)
                if self._pace_ms and act.keyed:
                    self._pace(act, len(msg.payload), began)
        except Exception as exc:  # an operator bug must not stop other dataflows
            text = f"{type(exc).__name__}: {exc}"
            out = Output(errors=[ErrorRecord(act.step.id, "operator_failure", text,
                                             None if msg.is_watermark else msg.payload[:10])])
            self.stats.dataflows[act.dataflow].failures.append(f"{act.step.id}: {text}")
        now = self.clock.now_ms()
        if out.errors:
            self.egress.errors(act.dataflow, out.errors, msg.ctx.ingest_ms, now)
        if out.events:
            act.events_out += len(out.events)
            if act.is_sink:
                self._egress(act, out.events, msg, now)
            waiting = None
            if act.lends:  # a hot key's owner behind: its events may go to a lessee
                waiting = self._waiting_for(aid)
            for target, port, events in act.split(out.events, waiting):
                self._route(aid, self.sched.derive(msg, target, events, now, port=port))
        if out.watermark is not None:
            if act.lessee:  # its partials reach the owners before the watermark that fires
                for target, rows in act.partials():
                    self._route(aid, self.sched.derive(msg, target, [MERGE, rows], now, port=0,
                                                       is_watermark=True))
            for target, port in act.watermark_targets():
                self._route(aid, self.sched.derive(msg, target, float(out.watermark), now, port=port,
                                                   is_watermark=True))
        if msg.upstream:
            self._ack(msg.upstream, aid, msg.size, self.sched.feedback_for(aid, msg.upstream).path_cost_ms)
        elif msg.size:
            self.flow.consumed(aid, msg.size)

    def _waiting_for(self, sender: str) -> Callable[[str], float]:
        """target -> events of `sender` it has before the next ones (sent, not yet done);
        a channel over half its credits counts as full: more there would hold the sender.
        Only the owner whose own channel backs up lends: counting the sender's queue too
        would make every owner on its executor look behind and flood the lessees."""
        outstanding, full = self.flow.outstanding, self.flow.credit_events // 2

        def waiting(t: str) -> float:
            sent = outstanding[(sender, t)]
            return math.inf if sent >= full else sent
        return waiting

    def _egress(self, act: Activation, events: list[Any], msg: Message, now: float) -> None:
        # Latency: egress time minus the ingest time of the message that made these computable.
        counters = self.stats.dataflows[act.dataflow]
        latency = now - msg.ctx.ingest_ms
        counters.latency.record(latency, len(events))
        act.results += len(events)
        if latency <= counters.latency.target_ms:
            act.within += len(events)
        counters.events_out += len(events)
        if self._trace >= 0:
            target = counters.latency.target_ms
            self._egressed = (len(events), len(events) if latency <= target else 0, now, target)
        self.egress.results(act.dataflow, act.id, events, msg.ctx.ingest_ms, now)

    # == 3. route ======================================================================
    def _route(self, sender: str, msg: Message) -> None:
        act = self.hosting.activations.get(sender)
        if act is not None:
            msg.generation = act.generation
        msg.trace = self._trace
        if msg.size:
            self.flow.sent(sender, msg.target, msg.size)
        host = self.hosting.hosts.get(msg.target)
        if host == self.index:
            target = self.hosting.activations.get(msg.target)
            if target is not None:
                self.sched.enqueue(msg, self.clock.now_ms())
                target.events_arrived += msg.size
        elif host is not None:
            self.channels.message(host, msg)
            if act is not None:
                self._unflushed[act] = self._unflushed.get(act, 0) + 1

    def flush(self) -> None:
        """Send what was collected for other executors: one call per destination. Its
        encoding time is shared among the activations that sent (useful time)."""
        start = self.clock.now_ms()
        if not self.channels.flush():
            return
        end = self.clock.now_ms()
        senders, self._unflushed = self._unflushed, {}
        if senders:
            share = (end - start) / sum(senders.values())
            for act, n in senders.items():
                act.ser_ms += share * n
        if self.tracer is not None:
            self.tracer.transfer(SERIALIZE, start, end)

    def _pace(self, act: Activation, events: int, began: float) -> None:
        """A simulated executor of fixed speed (`RuntimeConfig.service_capacity_eps`): a
        keyed instance's message takes `events` times one event's share, sleeping the
        rest, so that added executors add capacity as on a cluster. Its clock runs on
        from the last message's due end (unless it idled since), so a sleep that
        overran is taken off the next one and the instance's rate stays exact."""
        if began - act.paced_until > PACE_IDLE_MS:
            act.paced_until = began
        act.paced_until += events * self._pace_ms
        left = act.paced_until - self.clock.now_ms()
        if left > 0:
            time.sleep(left / 1000.0)

    def _unsendable(self, sender: str, events: list[Any], why: str) -> None:
        """Events an operator output that cannot travel to another executor: to the error
        output of the sender's dataflow, so nothing is lost silently and the link goes on."""
        act = self.hosting.activations.get(sender)
        if act is None:
            return
        records = [ErrorRecord(act.step.id, "unencodable", f"step {act.step.id!r} output {why}; "
                               "fix: make the function return JSON-like values", short_repr(e))
                   for e in events]
        self.egress.errors(act.dataflow, records, self.clock.now_ms(), self.clock.now_ms())

    # == 4. acknowledge ==================================================================
    def _ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        host = self.hosting.hosts.get(upstream)
        if host == self.index:
            self._on_ack(upstream, downstream, n, path_cost_ms)
        elif host is not None:
            self.channels.ack(host, (upstream, downstream, n, path_cost_ms))

    def _on_ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        self.sched.on_feedback(upstream, Feedback(downstream, max(0.0, path_cost_ms)), self.clock.now_ms())
        self.flow.acked(upstream, downstream, n)

    # == reports ========================================================================
    def dataflow_stats(self, dataflow: str) -> DataflowPart:
        ids = self.hosting.ids(dataflow)
        return self.stats.part(dataflow, ids, self.sched, self.egress.error_counts(dataflow),
                               self.flow.held_among(ids))

    def executor_stats(self) -> ExecutorStats:
        return self.stats.executor(self.sched, len(self.hosting.activations), len(self.flow.held),
                                   self.faults)

    def ended(self, dataflow: str) -> bool:
        """Every activation of `dataflow` here has seen the end of every input (its
        sources were closed) and run all that came before it: nothing more will come out."""
        for aid in self.hosting.ids(dataflow):
            act = self.hosting.activations[aid]
            if self.sched.pending(aid) or not act.saw_end():
                return False
        return True

    def usage(self) -> dict[str, dict[str, float]]:
        """dataflow -> what it uses here: estimated bytes of its operator state and unread
        outputs, and its counters since it came here (events in, executor ms, results,
        results within target)."""
        out: dict[str, dict[str, float]] = {}
        for dataflow in self.hosting.dataflows:
            ids = self.hosting.ids(dataflow)
            state = sum(approx_bytes(self.hosting.activations[aid].operator) for aid in ids)
            counters = self.stats.dataflows.get(dataflow)
            out[dataflow] = {
                "bytes": state + self.egress.footprint(dataflow),
                "events_in": counters.events_in if counters else 0,
                "busy_ms": sum(self.sched.profile(a).busy_ms for a in ids),
                "results": counters.latency.count if counters else 0,
                "within": counters.latency.within_target if counters else 0}
        return out

    def counters(self) -> dict[str, dict[str, list[float]]]:
        """dataflow -> activation -> DS2's counters since it came here: [events in, events
        out, processing ms, deserialization ms, serialization ms, recent queueing delay ms,
        events waiting, events arrived (a source's: from clients), results a sink wrote and
        those within target, when they were read (wall clock, s)]. The scaling controller
        takes rates from their differences."""
        out: dict[str, dict[str, list[float]]] = {}
        sched = self.sched
        at = time.time()  # taken here: the call may wait behind a message
        for dataflow in self.hosting.dataflows:
            acts = out[dataflow] = {}
            for aid in self.hosting.ids(dataflow):
                act, prof = self.hosting.activations[aid], sched.profile(aid)
                acts[aid] = [act.events_in, act.events_out, prof.busy_ms, act.deser_ms,
                             act.ser_ms, prof.queue_delay_ms,
                             max(0, act.events_arrived - act.events_in),
                             act.events_arrived, act.results, act.within, at]
        return out

    def unsettled(self, names: list[str] | None = None) -> Unsettled:
        """What this executor still has to do for each dataflow of `names` hosted here
        (None: every one), so that a client can wait until every result of the events it
        pushed is readable (`Runtime.wait_idle`). Runs on the worker thread, after the
        work handed over before it (ingest calls, batches from other executors)."""
        work: dict[str, DataflowWork] = {}
        for name in self.hosting.dataflows if names is None else names:
            if name not in self.hosting.dataflows:
                continue
            acts = [self.hosting.activations[a] for a in self.hosting.ids(name)]
            work[name] = {
                "queued": sum(self.sched.pending(a.id) for a in acts),
                "parked": sum(len(calls) for a in acts for calls in a.parked.values()),
                "moving": sum(1 for a in acts if a.epoch is not None),
                "held": self.flow.held_among(a.id for a in acts),
                "sent": self.channels.sent_of(name),
                "awaiting_checkpoint": self.egress.awaiting_checkpoint(name)}
        return {"dataflows": work, "applied": dict(self.channels.seq_in)}

    def idle(self) -> tuple[bool, dict[int, int], dict[int, int]]:
        """(nothing to do here, batches sent per executor, batches applied per sender)."""
        return self._idle(), dict(self.channels.seq_out), dict(self.channels.seq_in)

    def _idle(self) -> bool:
        # A source holding an early ingest call waits for the one before it.
        return self.sched.backlog == 0 and not self.inbox and self.channels.idle() \
            and not any(act.parked for act in self.hosting.activations.values())


def _max_time(events: list[Any], field_name: str | None) -> float:
    if not field_name:
        return -math.inf
    best = -math.inf
    for e in events:
        try:
            t = e[field_name]
        except (KeyError, TypeError):
            continue
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > best:
            best = t
    return float(best)
