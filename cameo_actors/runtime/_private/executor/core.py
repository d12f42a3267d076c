"""The executor's logic, without Ray: one message path through parts with one job each.

One `ExecutorCore` is owned by one thread (the executor's worker thread); the
Ray actor around it (`executor.py`) hands it work through its `inbox`, so none
of its state needs a lock. The parts:

- `hosting`   the activations hosted here, and where every activation runs;
- `channels`  sequence numbers, in-order delivery, batching per destination;
- `flow`      credits per channel, held senders, backpressure at sources;
- `egress`    result logs and the error output, with offsets and commit;
- `stats`     counters, latency, and the reports of dataflows and the executor;
- `sched`     the two-level deadline scheduler (`cameo_actors.scheduling`);
- `ingress`   clients' ingest calls at the sources, applied in order, once;
- `checkpointing`  checkpoint parts taken at barriers, ingress logs, restoring;
- `plan_changes`   the executor's side of the controller's plan changes: new and
  retired instances, moving bins (Megaphone), lessees (Dirigo);
- `reports`   statistics, usage, DS2's counters, work still to do.

This class hosts, runs the scheduling loop and the message path below, and
answers every call of the executor, through the part that owns it. Every part
that keeps per-dataflow state implements `DataflowScoped`, so deploy and cancel
reach all of them the same way. The parts that put messages on the path
(`checkpointing`, `plan_changes`) get it as a `MessagePath` (`parts.py`),
which this class is; no part reads another's private fields.

The message path, and where the live runtime's concerns plug in:

1. *Admit* (`ingest` from clients, `receive` from executors, `route` for local
   hops): a message enters the scheduler. In-band control messages (routing
   epochs, migrated state, checkpoint barriers) are barriers in the mailbox,
   like watermarks. A source applies each client's ingest calls in order,
   once (`ingest`), after writing them to its ingress log (`ingress_log.py`).
2. *Execute* (`_execute`): the activation's operator runs on the message, or
   the activation on a control message (`Activation.on_control`: a table
   switch, a marker, a chunk of state to give or take; events of bins in
   flight wait in the activation). Trace records (start, end, which
   activation waited meanwhile) are taken here.
3. *Route* (`route`): outputs go to their targets; the versioned routing
   table chooses a bin's owner (`Activation.split`).
4. *Acknowledge* (`_ack`, `_on_ack`): credits and Cameo's C_path feedback go
   back upstream.
Moving state is scheduled like any message (each chunk a message), so it runs
below due latency-sensitive work. The plan changes themselves (`prepare`,
`reroute`, `add_instances`, `retire`) come from the controller (`plan_changes.py`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import ErrorRecord, Output, short_repr
from cameo_actors.operators.columns import rows
from cameo_actors.runtime._private.checkpoint.parts import (
    CHECKPOINT,
    INDEX,
    SNAPSHOT,
    ChainRead,
    delivery,
)
from cameo_actors.runtime._private.exchange.channels import Channels, Send
from cameo_actors.runtime._private.exchange.epochs import MERGE, is_control
from cameo_actors.runtime._private.exchange.routes import partials_by_owner
from cameo_actors.runtime._private.exchange.wire import decode_message
from cameo_actors.runtime._private.executor.activation import Activation
from cameo_actors.runtime._private.executor.checkpointing import Checkpointing, Persist
from cameo_actors.runtime._private.executor.counters import Statistics
from cameo_actors.runtime._private.executor.egress import Egress
from cameo_actors.runtime._private.executor.flow import RESULTS_FULL, FlowControl
from cameo_actors.runtime._private.executor.hosting import Hosting
from cameo_actors.runtime._private.executor.ingress import Ingress
from cameo_actors.runtime._private.executor.parts import DataflowScoped
from cameo_actors.runtime._private.executor.plan_changes import PlanChanges
from cameo_actors.runtime._private.executor.reports import Reports
from cameo_actors.runtime._private.executor.sizing import MessageSizing
from cameo_actors.runtime._private.executor.source_log import IngressLog
from cameo_actors.runtime._private.executor.tracing import Egressed, make_tracer
from cameo_actors.runtime._private.executor_api import MergedParts
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.scheduling import Feedback, Message, Scheduler
from cameo_actors.tracing.records import DESERIALIZE, SERIALIZE, UNTRACED

#: Tracebacks of faults in the runtime itself kept for executor stats (never expected).
FAULTS_KEPT = 20


#: The shortest a message for another executor waits for others to share its call,
#: while the worker has more to compute (an idle worker sends at once).
MIN_LINGER_MS = 2.0
#: How often the worker looks for sources gone idle (`idle_sources`), ms.
IDLE_CHECK_MS = 10.0


class ExecutorCore:
    """One executor's logic: hosting, the scheduling loop and the message path; the
    executor's other calls are answered by the part that owns them (module docstring)."""

    def __init__(self, index: int, config: RuntimeConfig, send: Send,
                 clock: Clock | None = None, persist: Persist | None = None) -> None:
        self.index = index
        self.config = config
        self.clock = clock or SystemClock()
        self.sched = Scheduler(config.policy, quantum_ms=config.quantum_ms,
                               policy_params=dict(config.policy_params),
                               floor_slack_ms=config.floor_slack_ms if config.tenant_floor else None)
        self.hosting = Hosting(index, FunctionResolver(config.allowed_modules),
                               max_string_chars=config.max_string_chars,
                               backend=config.state_backend_of())
        self.channels = Channels(index, send, self._unsendable,
                                 min(config.exchange_batch_events, config.credit_events // 4))
        self.flow = FlowControl(config.credit_events, config.ingress_events,
                                self.sched.hold, self.sched.release)
        self.egress = Egress(config.result_capacity,
                             hold=lambda sink: self.flow.hold(sink, RESULTS_FULL),
                             release=lambda sink: self.flow.release(sink, RESULTS_FULL),
                             state_budget_bytes=config.state_budget_bytes,
                             delivery=lambda spec: delivery(spec, config))
        self.stats = Statistics(index)
        self.tracer = make_tracer(index, config.trace_sample, config.trace_capacity)
        self.faults: deque[str] = deque(maxlen=FAULTS_KEPT)

        def now_ms() -> float:  # read through the core: a test may give it another clock
            return self.clock.now_ms()
        self.ingress = Ingress(config.max_message_events, config.quantum_ms, self.hosting,
                               self.sched, self.flow, self.egress, self.stats, self.tracer,
                               now_ms)
        self.checkpointing = Checkpointing(config, self.hosting, self.sched, self.flow,
                                           self.egress, self.ingress, now_ms, self, persist)
        #: source activation -> its write-ahead log (the checkpointing part's)
        self.ingress_logs: dict[str, IngressLog] = self.checkpointing.ingress_logs
        self.plan_changes = PlanChanges(self.hosting, self.sched, now_ms, self)
        self.reports = Reports(self.hosting, self.sched, self.flow, self.egress, self.stats,
                               self.channels, self.faults)
        #: how long one message may run here
        self.sizing = MessageSizing(config, self.sched, self.ingress, self.stats, self.clock)
        #: the traced activity running now (its outputs carry it), and the results it wrote
        self._trace = UNTRACED
        self._egressed: Egressed | None = None
        self._scoped: tuple[DataflowScoped, ...] = (self.flow, self.egress, self.stats)
        #: activation -> messages it sent to other executors since the last flush (the
        #: flush's encoding time is shared among them)
        self._unflushed: dict[Activation, int] = {}
        self._next_idle_check = -math.inf
        # Work handed over by other threads, run by the owner thread.
        self.inbox: deque[Callable[[], None]] = deque()

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
        self.checkpointing.open_logs(spec, built, deployment)
        self.sizing.retarget()
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
        self.checkpointing.close_logs(hosted.ids, keep=keep_logs)
        self.sizing.retarget()
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
            self.sizing.retarget()

    def host(self, spec: DataflowSpec, placement: Placement, new: list[str], generation: int,
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
            self.sizing.retarget()
        for act in built:
            self._schedule(spec, act)
        return {a.id for a in built}

    def unhost(self, dataflow: str, ids: list[str]) -> list[str]:
        """Activations gone from the dataflow: those hosted here stop (returned)."""
        here = self.hosting.forget(dataflow, ids)
        for aid in here:
            self.sched.remove_activation(aid)
        self.flow.close(dataflow, here)
        return here

    # == restoring: deployed again, then as the checkpoint has it (checkpointing.py) =====
    def restore(self, spec: DataflowSpec, placement: Placement, deployment: str,
                parts: dict[str, ChainRead], generation: int,
                chains: dict[str, list[str]] | None = None,
                merged: MergedParts | None = None) -> list[str]:
        """Deploy `spec` here again as checkpoint `parts` (activation -> its chain of parts,
        read and unpacked: `read_chain`; stored at `chains`) has it, held until `resume`
        (`Checkpointing.restore`; `merged`: a Kafka source rescaled). Its error output here
        is kept."""
        old = self.egress.dataflows.get(spec.name)
        self.cancel(spec.name, keep_logs=True)
        ids = self.deploy(spec, placement, deployment, generation)
        self.checkpointing.restore(spec, ids, parts, old, chains, merged)
        return ids

    # == 1. admit ===================================================================
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
            for act in set(got):
                act.calls_in += 1
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
        # Traced: the activity is recorded, and what it sends carries its id (`route`).
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
        if not msg.is_watermark:
            self.sizing.cut(act, msg)
        if act.part is not None and act.part.pending:  # a checkpoint waits for barriers here
            self.checkpointing.record(act, msg)
        try:
            if msg.is_watermark:
                if is_control(msg.payload) and msg.payload[0] == CHECKPOINT:
                    self.checkpointing.on_barrier(act, msg)
                    out = Output()
                elif is_control(msg.payload) and msg.payload[0] == SNAPSHOT:
                    self.checkpointing.snapshot_step(act, msg)
                    out = Output()
                elif is_control(msg.payload) and msg.payload[0] == INDEX:
                    self.checkpointing.index_step(act, msg)
                    out = Output()
                elif is_control(msg.payload):
                    out, barriers = act.on_control(msg.payload, msg.port, msg.upstream)
                    now = self.clock.now_ms()
                    for target, port, payload in barriers:
                        self.route(aid, self.sched.derive(msg, target, payload, now, port=port,
                                                          is_watermark=True))
                else:
                    out = act.on_watermark(msg.payload, msg.port, msg.upstream)
            else:
                if act.idle_channels or act.idle_sent:
                    act.active(msg.port, msg.upstream)
                act.events_in += len(msg.payload)
                began = self.clock.now_ms() if self.sizing.paced else 0.0
                out = act.on_data(msg.payload, msg.port)
                if self.sizing.paced and act.keyed:
                    self.sizing.pace(act, len(msg.payload), began)
        except Exception as exc:  # an operator bug must not stop other dataflows
            text = f"{type(exc).__name__}: {exc}"
            out = Output(errors=[ErrorRecord(act.step.id, "operator_failure", text,
                                             None if msg.is_watermark else rows(msg.payload[:10]))])
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
                self.route(aid, self.sched.derive(msg, target, events, now, port=port))
        if out.watermark is not None:
            if act.lessee:  # its partials reach the owners before the watermark that fires
                for target, partials in partials_by_owner(act.routes[0], act.bins, act.operator):
                    self.route(aid, self.sched.derive(msg, target, [MERGE, partials], now, port=0,
                                                      is_watermark=True))
            for target, port in act.watermark_targets():
                self.route(aid, self.sched.derive(msg, target, float(out.watermark), now, port=port,
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
    def route(self, sender: str, msg: Message) -> None:
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
            self.channels.message(host, msg, self._due_ms(msg))
            if act is not None:
                self._unflushed[act] = self._unflushed.get(act, 0) + 1

    def _due_ms(self, msg: Message) -> float:
        """When a message for another executor must leave: it may wait for others to share
        its call a twentieth of what is left of its dataflow's latency target (Cameo's
        slack, not a fixed linger), at most `exchange_linger_ms`, and at least
        `MIN_LINGER_MS` while the worker is busy: a call costs about a fifth of that in
        CPU, so a late message (no slack left) does not make every call carry one."""
        now = self.clock.now_ms()
        counters = self.stats.dataflows.get(msg.ctx.dataflow)
        slack = msg.ctx.ingest_ms + counters.latency.target_ms - now if counters else 0.0
        linger = self.config.exchange_linger_ms
        return now + min(linger, max(MIN_LINGER_MS, slack / 20))

    def flush_after_slice(self, ran: bool) -> None:
        """What the worker sends after a slice: while it has more to run (`ran`), only the
        links that are due (`Channels.flush_due`); once it has nothing, everything."""
        self.flush(due_only=ran)

    def flush(self, due_only: bool = False) -> None:
        """Send what was collected for other executors (only the links that are due, with
        `due_only`): one call per destination. Its encoding time is shared among the
        activations that sent (useful time)."""
        start = self.clock.now_ms()
        if not (self.channels.flush_due(start) if due_only else self.channels.flush()):
            return
        end = self.clock.now_ms()
        senders, self._unflushed = self._unflushed, {}
        if senders:
            share = (end - start) / sum(senders.values())
            for act, n in senders.items():
                act.ser_ms += share * n
        if self.tracer is not None:
            self.tracer.transfer(SERIALIZE, start, end)

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

    def idle_sources(self) -> bool:
        """Sources with an idle timeout that took in nothing for it, and hold nothing
        waiting, tell their downstreams they are idle (`Activation.went_idle`); looked at
        every IDLE_CHECK_MS at most. Whether any did."""
        now = self.clock.now_ms()
        if now < self._next_idle_check:
            return False
        self._next_idle_check = now + IDLE_CHECK_MS
        went = False
        for act in self.hosting.activations.values():
            timeout = getattr(act.step, "idle_timeout_ms", None)  # sources have one
            if timeout is None or act.idle_sent or act.events_arrived > act.events_in \
                    or act.saw_end():
                continue
            if act.last_input_ms == -math.inf:  # its time counts from the first look
                act.last_input_ms = now
            hosted = self.hosting.dataflows.get(act.dataflow)
            if now - act.last_input_ms >= timeout and hosted is not None:
                self.send_barriers(hosted.spec, act.id, act.went_idle(), now)
                went = True
        return went

    def control(self, spec: DataflowSpec, target: str, payload: list[Any], now: float,
                first: bool = False) -> None:
        """A control message from the controller into `target`'s mailbox, a barrier there
        (`first`: ahead of every message pending there)."""
        self.sched.enqueue(Message.ingress(target, payload, dataflow=spec.name, tenant=spec.tenant,
                                           ingest_ms=now, is_watermark=True), now, first=first)

    def send_barriers(self, spec: DataflowSpec, sender: str, sends: list[Any], now: float) -> None:
        """Barriers (watermarks, control) an activation sends outside its message path."""
        if not sends:
            return
        parent = Message.ingress(sender, [], dataflow=spec.name, tenant=spec.tenant,
                                 ingest_ms=now, is_watermark=True)
        for target, port, payload in sends:
            self.route(sender, self.sched.derive(parent, target, payload, now, port=port,
                                                 is_watermark=True))

    # == 4. acknowledge ==================================================================
    def _ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        host = self.hosting.hosts.get(upstream)
        if host == self.index:
            self._on_ack(upstream, downstream, n, path_cost_ms)
        elif host is not None:  # with the data there, or sooner once a call's worth gathered
            self.channels.ack(host, (upstream, downstream, n, path_cost_ms),
                              self.clock.now_ms() + self.config.exchange_linger_ms)

    def _on_ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        self.sched.on_feedback(upstream, Feedback(downstream, max(0.0, path_cost_ms)), self.clock.now_ms())
        self.flow.acked(upstream, downstream, n)

    # == whether anything is left to do here (the other reports: reports.py) ============
    def idle(self) -> tuple[bool, dict[int, int], dict[int, int]]:
        """(nothing to do here, batches sent per executor, batches applied per sender)."""
        return self._idle(), dict(self.channels.seq_out), dict(self.channels.seq_in)

    def _idle(self) -> bool:
        # A source holding an early ingest call waits for the one before it.
        return self.sched.backlog == 0 and not self.inbox and self.channels.idle() \
            and not any(act.parked for act in self.hosting.activations.values())

