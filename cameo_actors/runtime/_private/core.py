"""The executor's logic, without Ray: activations, scheduling, routing, credits, egress.

One `ExecutorCore` is owned by one thread (the executor's worker thread); the
Ray actor around it (`executor.py`) hands it work through `submit`, so none of
its state needs a lock. Messages to activations on the same executor are
local enqueues; messages to other executors are collected per destination
and sent as one call by `flush` through the `send` function given.

Flow control is by credits per channel (upstream activation -> downstream
activation): a sender with more than `credit_events` unacknowledged events on
a channel is held out of the run queue until acks come back. Acks carry the
downstream's path cost (Cameo's C_path feedback) upstream.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.clock import Clock, SystemClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import ErrorRecord, Output
from cameo_actors.runtime.activation import Activation
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.egress import ErrorLog, LatencyStats, ResultLog
from cameo_actors.runtime.wire import Ack, decode_message, encode_message, pack_link, unpack_link
from cameo_actors.scheduling import Feedback, Message, Scheduler

Send = Callable[[int, bytes], None]


@dataclass
class DataflowState:
    """What this executor keeps of one dataflow it hosts part of."""

    spec: DataflowSpec
    latency: LatencyStats
    errors: ErrorLog = field(default_factory=ErrorLog)
    results: dict[str, ResultLog] = field(default_factory=dict)  # sink activation -> log
    events_in: int = 0
    events_out: int = 0
    failures: list[str] = field(default_factory=list)
    #: The error output with offsets, for a reader (the Spark tier) to consume exactly once;
    #: beyond ERROR_LOG_CAPACITY unread records the oldest are dropped and counted.
    error_log: ResultLog = field(default_factory=ResultLog)
    error_log_dropped: int = 0
    #: Spark input batches handed over: "<source>@<query id>" -> the last batch id whose
    #: events were all enqueued at the source before this mark (for checkpoint alignment).
    input_batches: dict[str, int] = field(default_factory=dict)


#: Unread records of a dataflow's error output kept per executor (see DataflowState.error_log).
ERROR_LOG_CAPACITY = 100_000


class ExecutorCore:
    def __init__(self, index: int, config: RuntimeConfig, send: Send,
                 clock: Clock | None = None) -> None:
        self.index = index
        self.config = config
        self.send = send
        self.clock = clock or SystemClock()
        self.sched = Scheduler(config.policy, quantum_ms=config.quantum_ms,
                               policy_params=dict(config.policy_params))
        self.resolver = FunctionResolver(config.allowed_modules)
        self.activations: dict[str, Activation] = {}
        self.hosts: dict[str, int] = {}          # activation id -> executor index (all dataflows)
        self.dataflows: dict[str, DataflowState] = {}
        # Transport.
        self._out_msgs: dict[int, list[tuple[Any, ...]]] = {}
        self._out_acks: dict[int, list[Ack]] = {}
        self._link_seq_out: Counter[int] = Counter()
        self._link_seq_in: Counter[int] = Counter()
        self._link_parked: dict[int, dict[int, bytes]] = {}
        self._ingress_seq: Counter[str] = Counter()
        self._ingress_parked: dict[str, dict[int, Callable[[], None]]] = {}
        # Credits.
        self._outstanding: Counter[tuple[str, str]] = Counter()
        self._starved: dict[str, set[str]] = {}  # held activation -> channels over the limit
        # Ingress backpressure: events enqueued at each source activation, not yet run.
        self.ingress_pending: Counter[str] = Counter()
        self.ingress_cond = threading.Condition()
        # Work handed over by other threads, run by the owner thread.
        self.inbox: deque[Callable[[], None]] = deque()
        #: Tracebacks of faults in the runtime itself (never expected; shown in stats).
        self.faults: deque[str] = deque(maxlen=20)

    # == control (called on the owner thread) ======================================
    def deploy(self, spec: DataflowSpec, hosts: dict[str, int]) -> list[str]:
        """Create the activations of `spec` that `hosts` places on this executor."""
        if spec.name in self.dataflows:
            raise ValueError(f"dataflow {spec.name!r} is already deployed on executor {self.index}")
        state = DataflowState(spec, LatencyStats(spec.latency_target_ms))
        mine = [aid for aid, ex in hosts.items() if ex == self.index]
        built = []
        for aid in mine:
            _, step_id, instance = aid.rsplit("/", 2)
            act = Activation(spec, step_id, int(instance), self.resolver)
            built.append(act)
        # Only after every operator was built (a bad function path fails above) do we change state.
        self.hosts.update(hosts)
        self.dataflows[spec.name] = state
        for act in built:
            self.activations[act.id] = act
            self.sched.add_activation(act.id, dataflow=spec.name, tenant=spec.tenant,
                                      latency_target_ms=spec.latency_target_ms,
                                      weight=spec.scheduling.weight, window=act.window_timing)
            if act.is_sink:
                state.results[act.id] = ResultLog()
        return mine

    def cancel(self, dataflow: str) -> int:
        """Free a dataflow's activations, queues, credits and buffers; returns messages dropped."""
        state = self.dataflows.pop(dataflow, None)
        if state is None:
            return 0
        prefix = dataflow + "/"
        dropped = 0
        for aid in [a for a in self.activations if a.startswith(prefix)]:
            dropped += len(self.sched.remove_activation(aid))
            del self.activations[aid]
            self._starved.pop(aid, None)
            with self.ingress_cond:
                self.ingress_pending.pop(aid, None)
                self.ingress_cond.notify_all()
        for chan in [c for c in self._outstanding if c[0].startswith(prefix)]:
            del self._outstanding[chan]
        for aid in [a for a in self.hosts if a.startswith(prefix)]:
            del self.hosts[aid]
        return dropped

    def update(self, dataflow: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> None:
        """Change a running dataflow's target or weight; new messages are stamped with it."""
        state = self.dataflows[dataflow]
        for aid in self._activation_ids(dataflow):
            profile = self.sched.profile(aid)
            if latency_target_ms is not None:
                profile.latency_target_ms = float(latency_target_ms)
            if weight is not None:
                profile.weight = float(weight)
        if latency_target_ms is not None:
            state.latency.target_ms = float(latency_target_ms)

    # == input ===================================================================
    def ingest(self, client: str, seq: int, target: str, items: list[Any], ingest_ms: float) -> None:
        """Events (lists) and watermarks (numbers) from a client, in the client's order."""
        parked = self._ingress_parked.setdefault(client, {})
        parked[seq] = lambda: self._ingest_now(target, items, ingest_ms)
        while self._ingress_seq[client] in parked:
            parked.pop(self._ingress_seq[client])()
            self._ingress_seq[client] += 1

    def _ingest_now(self, target: str, items: list[Any], ingest_ms: float) -> None:
        act = self.activations.get(target)
        if act is None:
            return  # cancelled meanwhile
        state = self.dataflows[act.dataflow]
        tf = getattr(act.operator, "event_time", None)  # sources know their event-time field
        now = self.clock.now_ms()
        cut = self.config.max_message_events
        for item in items:
            if not isinstance(item, list):  # a watermark
                self.sched.enqueue(Message.ingress(target, float(item), dataflow=state.spec.name,
                                                   tenant=state.spec.tenant, ingest_ms=ingest_ms,
                                                   is_watermark=True), now)
                continue
            for i in range(0, len(item), cut):
                part = item[i:i + cut]
                msg = Message.ingress(target, part, dataflow=state.spec.name, tenant=state.spec.tenant,
                                      ingest_ms=ingest_ms, event_ms=_max_time(part, tf), size=len(part))
                state.events_in += len(part)
                with self.ingress_cond:
                    self.ingress_pending[target] += len(part)
                self.sched.enqueue(msg, now)

    def receive(self, blob: bytes) -> None:
        """A batch from another executor; applied in the sender's order."""
        sender, seq, _, _ = unpack_link(blob)
        parked = self._link_parked.setdefault(sender, {})
        parked[seq] = blob
        while self._link_seq_in[sender] in parked:
            _, _, messages, acks = unpack_link(parked.pop(self._link_seq_in[sender]))
            self._link_seq_in[sender] += 1
            now = self.clock.now_ms()
            for t in messages:
                msg = decode_message(t)
                if msg.target in self.activations:
                    self.sched.enqueue(msg, now)
                else:  # cancelled meanwhile: return the credits all the same
                    self._ack(msg.upstream, msg.target, msg.size, 0.0)
            for up, down, n, path_cost in acks:
                self._on_ack(up, down, n, path_cost)

    # == running (the owner thread's loop) =========================================
    def drain_inbox(self) -> None:
        inbox = self.inbox
        while inbox:
            inbox.popleft()()

    def run_slice(self) -> bool:
        """Run one scheduling slice; False if there was nothing to run."""
        return self.sched.run_once(self._execute, self.clock, poll=self.drain_inbox) is not None

    def _execute(self, aid: str, msg: Message) -> None:
        act = self.activations[aid]
        state = self.dataflows[act.dataflow]
        try:
            if msg.is_watermark:
                out = act.on_watermark(msg.payload, msg.port, msg.upstream)
            else:
                out = act.on_data(msg.payload, msg.port)
        except Exception as exc:  # an operator bug must not stop other dataflows
            text = f"{type(exc).__name__}: {exc}"
            out = Output(errors=[ErrorRecord(act.step.id, "operator_failure", text,
                                             None if msg.is_watermark else msg.payload[:10])])
            state.failures.append(f"{act.step.id}: {text}")
        now = self.clock.now_ms()
        if out.errors:
            state.errors.extend(out.errors)
            self._log_errors(state, out.errors, msg, now)
        if out.events:
            if act.is_sink:
                self._egress(act, state, out.events, msg, now)
            for target, port, events in act.split(out.events):
                self._send(aid, self.sched.derive(msg, target, events, now, port=port))
        if out.watermark is not None:
            for target, port in act.watermark_targets():
                self._send(aid, self.sched.derive(msg, target, float(out.watermark), now, port=port,
                                                  is_watermark=True))
        if msg.upstream:
            self._ack(msg.upstream, aid, msg.size, self.sched.feedback_for(aid, msg.upstream).path_cost_ms)
        elif msg.size:
            with self.ingress_cond:
                before = self.ingress_pending[aid]
                self.ingress_pending[aid] = after = before - msg.size
                # Wake blocked writers only when the source drops below its limit (no herd).
                if after < self.config.ingress_events <= before:
                    self.ingress_cond.notify_all()

    def _egress(self, act: Activation, state: DataflowState, events: list[Any], msg: Message,
                now: float) -> None:
        # Latency: egress time minus the ingest time of the message that made these computable.
        state.latency.record(now - msg.ctx.ingest_ms, len(events))
        state.events_out += len(events)
        log = state.results[act.id]
        log.append(events, msg.ctx.ingest_ms, now)
        if len(log) >= self.config.result_capacity:
            self._starve(act.id, "results")

    def _log_errors(self, state: DataflowState, errors: list[ErrorRecord], msg: Message,
                    now: float) -> None:
        log = state.error_log
        log.append([e.to_dict() for e in errors], msg.ctx.ingest_ms, now)
        excess = len(log) - ERROR_LOG_CAPACITY
        if excess > 0:
            log.commit(log.committed_offset + excess)
            state.error_log_dropped += excess

    # == transport and credits =======================================================
    def _send(self, sender: str, msg: Message) -> None:
        if msg.size:
            chan = (sender, msg.target)
            self._outstanding[chan] += msg.size
            if self._outstanding[chan] > self.config.credit_events:
                self._starve(sender, msg.target)
        host = self.hosts.get(msg.target)
        if host == self.index:
            if msg.target in self.activations:
                self.sched.enqueue(msg, self.clock.now_ms())
        elif host is not None:
            self._out_msgs.setdefault(host, []).append(encode_message(msg))

    def _ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        host = self.hosts.get(upstream)
        if host == self.index:
            self._on_ack(upstream, downstream, n, path_cost_ms)
        elif host is not None:
            self._out_acks.setdefault(host, []).append((upstream, downstream, n, path_cost_ms))

    def _on_ack(self, upstream: str, downstream: str, n: int, path_cost_ms: float) -> None:
        chan = (upstream, downstream)
        if chan in self._outstanding:
            self._outstanding[chan] -= n
        self.sched.on_feedback(upstream, Feedback(downstream, max(0.0, path_cost_ms)), self.clock.now_ms())
        # Resume at half the window, so a held sender gets a run of work, not a trickle.
        if self._outstanding[chan] <= self.config.credit_events // 2:
            self._unstarve(upstream, downstream)

    def _starve(self, aid: str, channel: str) -> None:
        self._starved.setdefault(aid, set()).add(channel)
        self.sched.hold(aid)

    def _unstarve(self, aid: str, channel: str) -> None:
        chans = self._starved.get(aid)
        if chans is None or channel not in chans:
            return
        chans.discard(channel)
        if not chans:
            del self._starved[aid]
            self.sched.release(aid)

    def flush(self) -> None:
        """Send what was collected for other executors: one call per destination."""
        if not self._out_msgs and not self._out_acks:
            return
        for host in set(self._out_msgs) | set(self._out_acks):
            seq = self._link_seq_out[host]
            self._link_seq_out[host] += 1
            self.send(host, pack_link(self.index, seq, self._out_msgs.pop(host, []),
                                      self._out_acks.pop(host, [])))

    # == results and stats ================================================================
    def read_results(self, dataflow: str, sink_activation: str, start: int, end: int | None
                     ) -> list[tuple[Any, float, float]]:
        return self.dataflows[dataflow].results[sink_activation].read(start, end)

    def commit_results(self, dataflow: str, sink_activation: str, offset: int) -> None:
        log = self.dataflows[dataflow].results[sink_activation]
        log.commit(offset)
        if len(log) < self.config.result_capacity // 2:
            self._unstarve(sink_activation, "results")

    def result_offsets(self, dataflow: str) -> dict[str, tuple[int, int]]:
        """sink activation -> (committed offset, end offset)."""
        return {aid: (log.committed_offset, log.end_offset)
                for aid, log in self.dataflows[dataflow].results.items()}

    def read_errors(self, dataflow: str, start: int, end: int | None
                    ) -> tuple[int, list[tuple[Any, float, float]]]:
        """(offset of the first row, rows) of the error output from `start` (or from the
        first kept row, when rows below it were dropped unread)."""
        log = self.dataflows[dataflow].error_log
        first = max(start, log.committed_offset)
        return first, log.read(first, end)

    def commit_errors(self, dataflow: str, offset: int) -> None:
        self.dataflows[dataflow].error_log.commit(offset)

    def error_offsets(self, dataflow: str) -> tuple[int, int, int]:
        """(committed offset, end offset, records dropped unread) of the error output."""
        state = self.dataflows[dataflow]
        return state.error_log.committed_offset, state.error_log.end_offset, state.error_log_dropped

    def mark_input_batch(self, dataflow: str, key: str, batch_id: int) -> None:
        """Record that every event of input batch `batch_id` (key "<source>@<query>") was
        enqueued here: runs on the owner thread after the ingests handed over before it."""
        batches = self.dataflows[dataflow].input_batches
        batches[key] = max(batch_id, batches.get(key, batch_id))

    def input_batches(self, dataflow: str) -> dict[str, int]:
        return dict(self.dataflows[dataflow].input_batches)

    def dataflow_stats(self, dataflow: str) -> dict[str, Any]:
        state = self.dataflows[dataflow]
        ids = self._activation_ids(dataflow)
        backlog = sum(self.sched.pending(a) for a in ids)
        return {
            "executor": self.index,
            "latency": state.latency.to_dict(),
            "events_in": state.events_in,
            "events_out": state.events_out,
            "errors": {f"{s}:{k}": n for (s, k), n in state.errors.counts.items()},
            "failures": list(state.failures[-20:]),
            "backlog": backlog,
            "busy_ms": sum(self.sched.profile(a).busy_ms for a in ids),
            "held": sorted(a for a in self._starved if a.startswith(dataflow + "/")),
        }

    def error_records(self, dataflow: str, limit: int) -> list[dict[str, Any]]:
        return [e.to_dict() for e in list(self.dataflows[dataflow].errors.records)[-limit:]]

    def executor_stats(self) -> dict[str, Any]:
        s = self.sched.stats
        return {"executor": self.index, "activations": len(self.activations),
                "backlog": self.sched.backlog, "executed": s.executed, "slices": s.slices,
                "preempted": s.preempted, "overdue": s.overdue, "busy_ms": s.busy_ms,
                "overhead_ms": s.overhead_ms,
                "overhead_us_per_message": s.overhead_us_per_message,
                "held": len(self._starved), "faults": list(self.faults)}

    def idle(self) -> tuple[bool, dict[int, int], dict[int, int]]:
        """(nothing to do here, batches sent per executor, batches applied per sender)."""
        return self._idle(), dict(self._link_seq_out), dict(self._link_seq_in)

    def _idle(self) -> bool:
        return self.sched.backlog == 0 and not self.inbox and not self._out_msgs \
            and not self._out_acks and not any(self._ingress_parked.values()) \
            and not any(self._link_parked.values())

    def _activation_ids(self, dataflow: str) -> list[str]:
        prefix = dataflow + "/"
        return [a for a in self.activations if a.startswith(prefix)]


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
