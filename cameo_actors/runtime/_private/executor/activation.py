"""An activation: one instance of one operator of one dataflow, hosted on an executor.

It adds to the operator what running on many instances needs: a watermark
per input channel (the minimum over a port's channels is the port's
watermark), routing of outputs to the instances of downstream steps (by
routing table for keyed steps, round robin otherwise, watermarks to all),
and its part of moving bins (`migration.py`): switching a table at a
marker, holding watermarks, giving and taking state, buffering.
Pure: no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import msgpack

from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import (
    DataflowSpec,
    JoinStep,
    ProcessStep,
    SinkStep,
    SourceStep,
    WindowStep,
)
from cameo_actors.operators.base import END_OF_STREAM, Event, Operator, Output
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.build import build_operator, key_function
from cameo_actors.operators.column_keys import hashable_column, key_field, split_by_key
from cameo_actors.operators.columns import is_columns, rows
from cameo_actors.operators.lease import build_lessee
from cameo_actors.operators.state_store import IN_MEMORY, StateBackend
from cameo_actors.operators.stateless import DEFAULT_MAX_STRING_CHARS
from cameo_actors.runtime._private.checkpoint.parts import Channel as InputChannel
from cameo_actors.runtime._private.checkpoint.parts import Part
from cameo_actors.runtime._private.collector import state_coming_in
from cameo_actors.runtime._private.exchange.epochs import (
    CHUNK_KEYS,
    EPOCH,
    EXTRACT,
    IDLE,
    MERGE,
    REROUTE,
    STATE,
    UNLEASE,
    Channel,
    Epoch,
)
from cameo_actors.runtime._private.exchange.routes import is_forward, lease_to, route_to
from cameo_actors.runtime._private.placement import Placement, is_keyed_step
from cameo_actors.runtime.boundary import ActivationId
from cameo_actors.scheduling import WindowTiming

NO_WM = -math.inf
#: A barrier message an activation sends: (target activation, port, watermark or control).
Barrier = tuple[str, int, Any]


class Activation:
    def __init__(self, spec: DataflowSpec, aid: ActivationId, placement: Placement,
                 resolver: FunctionResolver | None = None, *,
                 max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
                 backend: StateBackend = IN_MEMORY) -> None:
        step = spec.step(aid.step)
        instance = aid.instance
        self.aid = aid
        self.id = str(aid)
        self.dataflow = spec.name
        self.step = step
        #: a lessee of its window step (Dirigo, `lease.py`): partial aggregates, merged
        #: into the owners of their keys before its watermark reaches them
        self.lessee = aid in placement.lessees
        self.operator: Operator = build_lessee(spec, step) if self.lessee else \
            build_operator(spec, step, resolver, max_string_chars=max_string_chars)
        self.is_source = isinstance(step, SourceStep)
        self.is_sink = isinstance(step, SinkStep)
        self.instance = instance
        self.bins = placement.bins
        self.keyed = is_keyed_step(spec, step)
        # Input channels per port: the upstream instances that send here ("" = ingress for sources).
        self.channels: list[dict[str, float]] = [
            {str(a): NO_WM
             for a in ([ActivationId(spec.name, up, instance)] if is_forward(spec, spec.step(up), step)
                       else placement.of_step(up))}
            for up in step.inputs
        ] or [{"": NO_WM}]
        if not self.lessee:  # the lessees' partials come in on the first port
            self.channels[0].update((str(a), NO_WM) for a in placement.lessees_of(step.id))
        # A lessee's one route is to its own step's instances, by the step's table.
        self.routes = [route_to(spec, placement, aid, self.lessee, step, 0)] if self.lessee \
            else [route_to(spec, placement, aid, self.lessee, consumer, port)
                  for consumer, port in spec.consumers(step.id)]
        self._round_robin = 0
        self.window_timing = frontier_timing(spec, step)
        # Moving bins (keyed steps only): the key of an input event per port, the epoch
        # under way and the plans of the next ones, the last version done.
        self.key_fns = [key_function(spec, up) for up in step.inputs] if self.keyed else []
        self.epoch: Epoch | None = None
        self.plans: dict[int, Epoch] = {}
        if self.keyed:  # its state kept in the routing table's bins, moved bin by bin; a
            # lessee's partials are taken whole at each merge, so they stay in memory
            self.operator.use_bins(  # type: ignore[attr-defined]
                self.bins, IN_MEMORY if self.lessee else backend)
        self.done_version = placement.tables[step.id].version if step.id in placement.tables else 0
        self.bins_given = self.bytes_sent = 0  # given away here, over every epoch
        # A source's input order: client -> its next ingest call, and the calls that
        # came early (Ray may reorder calls; a resent call that was applied is dropped).
        self.positions: dict[str, int] = {}
        #: the watermark the calls taken in so far leave at this source (`Ingress._lead`)
        self.lead_ms = -math.inf
        #: source idleness (`SourceStep.idle_timeout_ms`): when a source last took in a call
        #: (ms), the input channels that said they are idle (left out of their port's
        #: watermark until they send again), and whether this activation said so downstream
        self.last_input_ms = -math.inf
        self.idle_channels: set[Channel] = set()
        self.idle_sent = False
        self.parked: dict[str, dict[int, tuple[list[Any], float]]] = {}
        #: this activation's part of the latest checkpoint (checkpoint.py)
        self.part: Part | None = None
        #: the stored parts its state is in as of its part in the last completed
        #: checkpoint (the full one first): what its next part may build on; None: none
        self.chain: list[str] | None = None
        #: the sizes of that chain: (its full part, the incremental ones after it)
        self.chain_bytes = (0, 0)
        #: the dataflow's restores so far: messages of an earlier run are dropped
        self.generation = 0
        #: DS2's instrumentation: events in and out, and the useful time outside the
        #: operator (decoding what arrived, encoding what left), in ms; the processing
        #: time is the scheduler's busy time of this activation
        self.events_in = self.events_out = 0
        self.deser_ms = self.ser_ms = 0.0
        #: calls that brought it messages (a client's ingest call, a batch from another
        #: executor): the executor's CPU outside its worker thread is charged by them
        self.calls_in = 0
        #: events that arrived in its mailbox (a source's: from clients, the offered rate
        #: while its ingress queue has room); less events_in: those waiting
        self.events_arrived = 0
        #: a sink's results, and those within the dataflow's target
        self.results = self.within = 0
        #: a paced instance's simulated clock (`ExecutorCore._pace`), ms
        self.paced_until = -math.inf

    # -- input -------------------------------------------------------------------
    def on_data(self, events: list[Event], port: int) -> Output:
        epoch = self.epoch
        if epoch is not None and epoch.take:  # events of bins whose state has not arrived wait
            mine = self._buffer(epoch, rows(events), port)
            if not mine:
                return Output()
            events = mine
        return self.operator.on_batch(events, port)

    def on_watermark(self, watermark: float, port: int, channel: str) -> Output:
        """A channel's watermark; the operator sees the port's minimum when it rises."""
        if self.is_source:  # one channel: the ingress
            return self.operator.on_watermark(watermark, port)
        epoch = self.epoch
        if epoch is not None and epoch.holds((port, channel)):
            held = epoch.held
            held[(port, channel)] = max(watermark, held.get((port, channel), NO_WM))
            return Output()
        if self.idle_channels or self.idle_sent:
            self.active(port, channel)
        return self._raise(watermark, port, channel)

    def _raise(self, watermark: float, port: int, channel: str) -> Output:
        """A channel's watermark recorded; the operator sees the port's when it rises."""
        chans = self.channels[port]
        if watermark <= chans.get(channel, NO_WM):
            return Output()
        chans[channel] = watermark
        return self.operator.on_watermark(self._port_watermark(port), port)

    # -- idleness ------------------------------------------------------------------
    def _port_watermark(self, port: int) -> float:
        """The least watermark of a port's channels, idle ones left out. A port all of
        whose channels are idle holds no other port back: it takes theirs (the least of
        the other ports'); when every input is idle, the highest watermark its channels
        reached (as Flink's watermark valve does). Held where it was instead, a window
        that one input's watermark closed, while another input not yet idle held it,
        would wait for the next input, though none may come."""
        idle = self.idle_channels
        chans = self.channels[port]
        if not idle:
            return min(chans.values())
        active = [wm for c, wm in chans.items() if (port, c) not in idle]
        if active:
            return min(active)
        others = [wm for p, cs in enumerate(self.channels) if p != port
                  for c, wm in cs.items() if (p, c) not in idle]
        return min(others) if others else max(chans.values(), default=NO_WM)

    def on_idle(self, port: int, channel: str) -> tuple[Output, list[Barrier]]:
        """A channel says it is idle: the port's watermark without it (the operator moves
        on if that is higher), and, once every input is idle, this activation's own
        IDLE to its downstreams."""
        self.idle_channels.add((port, channel))
        if self.epoch is not None and self.epoch.involved:
            return Output(), []  # watermarks wait for the epoch; its end counts this one out
        out = self.operator.on_watermark(self._port_watermark(port), port)
        idle = self.idle_channels
        if self.idle_sent or any((p, c) not in idle for p, cs in enumerate(self.channels)
                                 for c, wm in cs.items() if wm < END_OF_STREAM):
            return out, []
        self.idle_sent = True
        return out, [(t, p, [IDLE]) for t, p in self.watermark_targets()]

    def went_idle(self) -> list[Barrier]:
        """A source that took in nothing for its idle timeout: IDLE to its downstreams."""
        self.idle_sent = True
        return [(t, p, [IDLE]) for t, p in self.watermark_targets()]

    def active(self, port: int, channel: str) -> None:
        """Data or a watermark came on a channel: it counts again (and so does this
        activation, downstream, with the next data or watermark it sends)."""
        self.idle_channels.discard((port, channel))
        self.idle_sent = False

    # -- output --------------------------------------------------------------------
    def split(self, events: list[Event], waiting: Callable[[str], float] | None = None
              ) -> list[tuple[str, int, list[Event]]]:
        """Output events -> [(target activation, port, events)]; columns stay columns
        (split by key without copying the columns per event). With lessees, a part
        a lessee can start sooner than its owner goes there (`lease_to`; `waiting`:
        target -> this activation's events it has before these)."""
        out: list[tuple[str, int, list[Event]]] = []
        for route in self.routes:
            owners = route.owners
            lend = route.lessees and waiting is not None
            if route.sole is not None and not lend:
                out.append((route.sole, route.port, events))
            elif owners is not None and route.key_fn is not None:
                mask, key_fn = self.bins - 1, route.key_fn
                field = key_field(key_fn) if is_columns(events) else None
                if field is not None and hashable_column(events, field):
                    parts: dict[str, Any] = split_by_key(
                        events, field, partial(route.owner_of, mask=mask))
                else:
                    parts = {}
                    owner_of, known = route.owner_of, route.memo.get
                    for e in rows(events):
                        k = key_fn(e)
                        t = known(k) if k.__class__ is str else None  # most keys: one lookup
                        if t is None:
                            t = owner_of(k, mask)
                        part = parts.get(t)
                        if part is None:
                            parts[t] = [e]
                        else:
                            part.append(e)
                if lend:
                    assert waiting is not None
                    out.extend((lease_to(t, len(part), route.lessees, waiting), route.port,
                                part) for t, part in parts.items())
                else:
                    out.extend((t, route.port, part) for t, part in parts.items())
            elif route.prefer is not None:
                out.append((route.prefer, route.port, events))
            elif len(route.targets) == 1:
                out.append((route.targets[0], route.port, events))
            else:
                self._round_robin = (self._round_robin + 1) % len(route.targets)
                out.append((route.targets[self._round_robin], route.port, events))
        return out

    def saw_end(self) -> bool:
        """Whether the end of the stream arrived on every input channel."""
        if self.is_source:
            return self.operator.watermark >= END_OF_STREAM
        return all(wm >= END_OF_STREAM for port in self.channels for wm in port.values())

    def watermark_targets(self) -> list[tuple[str, int]]:
        return [(t, r.port) for r in self.routes for t in r.targets]

    def upstreams(self) -> list[str]:
        return [c for port in self.channels for c in port if c]

    # -- checkpoints (checkpoint.py) ----------------------------------------------------
    def input_channels(self) -> set[InputChannel]:
        """The channels in, those at the end of their stream left out (no barrier comes)."""
        return {(port, c) for port, chans in enumerate(self.channels)
                for c, wm in chans.items() if wm < END_OF_STREAM}

    def begin_snapshot(self, positions: dict[str, int], incremental: bool = False
                       ) -> dict[str, Any]:
        """What restores this activation, at a checkpoint's cut: its operator (but for the
        state `Operator.snapshot_step` packs in steps and `end_snapshot` puts in; only
        what changed since the last cut if `incremental` and it can), its channels'
        watermarks, and a source's positions (`positions`, taken when the barrier was put
        in its mailbox)."""
        return {"operator": self.operator.begin_snapshot(incremental),
                "channels": [[port, c, wm] for port, chans in enumerate(self.channels)
                             for c, wm in chans.items()],
                "positions": positions}

    def end_snapshot(self, head: dict[str, Any]) -> dict[str, Any]:
        head["operator"] = self.operator.end_snapshot(head["operator"])
        return head

    def restore(self, state: dict[str, Any]) -> None:
        self.operator.restore(state["operator"])
        restored: dict[int, dict[str, float]] = {}
        for port, c, wm in state["channels"]:
            if port < len(self.channels):
                restored.setdefault(port, {})[c] = wm
        for port, chans in restored.items():
            if chans.keys() == self.channels[port].keys():
                self.channels[port].update(chans)
            else:  # its upstream's instances changed (a source rescaled: `source_rescale`):
                low = min(chans.values())  # each starts from the least (the port's own)
                for c in self.channels[port]:
                    self.channels[port][c] = low
        self.positions = dict(state["positions"])

    # -- changes of the physical plan (migration.py) ---------------------------------
    def add_channel(self, port: int, upstream: str) -> None:
        """A new instance upstream: its watermark counts from nothing."""
        self.channels[port][upstream] = NO_WM

    def add_target(self, step: str, target: str) -> None:
        """A new instance of a non-keyed downstream step (round robin includes it)."""
        for route in self.routes:
            if route.step == step and route.owners is None and target not in route.targets:
                route.targets = (*route.targets, target)

    def drop_targets(self, gone: set[str]) -> None:
        """Retired instances downstream: nothing more goes to them."""
        for route in self.routes:
            if any(t in gone for t in route.targets):
                route.targets = tuple(t for t in route.targets if t not in gone)
                if route.prefer in gone:
                    route.prefer = None

    def prepare(self, version: int, moves: dict[int, tuple[int, int]]) -> None:
        """The plan of routing version `version` of this (keyed) step: bin -> (old, new
        owner)."""
        me, name = self.instance, f"{self.dataflow}/{self.step.id}/"
        give = {b: f"{name}{new}" for b, (old, new) in moves.items() if old == me}
        take = frozenset(b for b, (_, new) in moves.items() if new == me)
        senders = frozenset(f"{name}{old}" for b, (old, new) in moves.items() if new == me)
        self.plans[version] = Epoch(version, give, take, senders)

    def on_control(self, payload: list[Any], port: int, channel: str) -> tuple[Output, list[Barrier]]:
        """A control message (see `migration.py`): (output to route, barriers to send)."""
        kind = payload[0]
        if kind == REROUTE:
            return Output(), self._reroute(payload[1], payload[2], payload[3], payload[4])
        if kind == EPOCH:
            return self._on_marker(payload[2], (port, channel))
        if kind == EXTRACT:
            return self._give_chunk()
        if kind == STATE:
            return self._on_state(payload[1], payload[2], payload[3], channel)
        if kind == MERGE:  # a lessee's partials, before its watermark
            out = Output()
            self.operator.merge_partials(payload[1], out)  # type: ignore[attr-defined]
            return out, []
        if kind == UNLEASE:  # the lessees of a downstream step get nothing more from here
            return Output(), self._unlease(payload[1], set(payload[2]))
        if kind == IDLE:
            return self.on_idle(port, channel)
        raise ValueError(f"activation {self.id}: unknown control message {kind!r}")

    def _reroute(self, step: str, version: int, owners: list[int], instances: list[int]
                 ) -> list[Barrier]:
        """Switch the route to `step` to table `version`: a marker on every channel to
        the step's instances, old and new, then this activation's watermark to new ones."""
        sends: list[Barrier] = []
        prefix = f"{self.dataflow}/{step}/"
        for route in self.routes:
            if route.step != step:
                continue
            targets = tuple(f"{prefix}{i}" for i in sorted(instances))
            for t in dict.fromkeys(route.targets + targets):
                sends.append((t, route.port, [EPOCH, step, version]))
            wm = self.operator.watermark
            if wm > NO_WM:
                sends.extend((t, route.port, wm) for t in targets if t not in route.targets)
            route.targets = targets
            route.set_table([f"{prefix}{i}" for i in owners])
        return sends

    def _unlease(self, step: str, gone: set[str]) -> list[Barrier]:
        """Stop lending to `gone`: the end of this channel's stream to each of them."""
        ends: list[Barrier] = []
        for route in self.routes:
            if route.step == step and route.lessees:
                ends += [(t, route.port, END_OF_STREAM) for t in route.lessees if t in gone]
                route.lessees = tuple(t for t in route.lessees if t not in gone)
                route.targets = tuple(t for t in route.targets if t not in gone)
        return ends

    @property
    def lends(self) -> bool:
        """Whether a downstream keyed step has lessees (outputs may go to one)."""
        return any(r.lessees for r in self.routes)

    def add_lessees(self, step: str, ids: list[str]) -> list[Barrier]:
        """New lessees of `step`: an instance of it expects their partials (an input
        channel); an upstream lends to them, starting with its watermark now."""
        if self.step.id == step and not self.lessee:
            for lessee in ids:
                self.channels[0][lessee] = NO_WM
        sends: list[Barrier] = []
        for route in self.routes:
            if route.step == step and route.owners is not None and not self.lessee:
                new = [t for t in ids if t not in route.lessees]
                route.lessees += tuple(new)
                route.targets += tuple(new)
                wm = self.operator.watermark
                if wm > NO_WM:
                    sends += [(t, route.port, wm) for t in new]
        return sends

    def drop_lessees(self, ids: set[str]) -> None:
        """Lessees gone (each ended its stream here first): no channel from them."""
        for lessee in ids:
            self.channels[0].pop(lessee, None)

    def _epoch_of(self, version: int) -> Epoch:
        """The epoch of `version`, begun by its first marker or state chunk, whichever
        comes first."""
        epoch = self.epoch
        if epoch is None or epoch.version != version:
            epoch = self.epoch = self.plans.pop(version, None) or Epoch(version)
        return epoch

    def _on_marker(self, version: int, channel: Channel) -> tuple[Output, list[Barrier]]:
        epoch = self._epoch_of(version)
        epoch.marked.add(channel)
        if epoch.give and epoch.bins is None and self._aligned(epoch):
            # Every event before the switch is in: what the moved bins hold is final.
            epoch.bins = sorted(epoch.give)
            return Output(), [(self.id, 0, [EXTRACT, version])]
        return self._finish_if_done(), []

    def _aligned(self, epoch: Epoch) -> bool:
        return len(epoch.marked) >= sum(len(p) for p in self.channels)

    def _give_chunk(self) -> tuple[Output, list[Barrier]]:
        """One bounded step of giving bins away: take the state of the next bins (about
        CHUNK_KEYS entries), send it to their new owners; after the last, an empty last
        chunk to each of them."""
        epoch = self.epoch
        assert epoch is not None and epoch.bins is not None
        take_bins = self.operator.take_bins  # type: ignore[attr-defined]
        rows_to: dict[str, list[Any]] = {}
        entries = 0
        while epoch.bins and entries < CHUNK_KEYS:
            b = epoch.bins.pop()
            rows, n = take_bins((b,))
            if rows:
                rows_to.setdefault(epoch.give[b], []).extend(rows)
            entries += n
        sends: list[Barrier] = []
        for to, rows in rows_to.items():
            blob = msgpack.packb(rows, use_bin_type=True)
            self.bytes_sent += len(blob)
            sends.append((to, 0, [STATE, epoch.version, blob, False]))
        if epoch.bins:
            return Output(), [*sends, (self.id, 0, [EXTRACT, epoch.version])]
        epoch.given = True
        self.bins_given += len(epoch.give)
        sends.extend((to, 0, [STATE, epoch.version, b"", True])
                     for to in sorted(set(epoch.give.values())))
        return self._finish_if_done(), sends

    def _on_state(self, version: int, blob: bytes, last: bool, sender: str
                  ) -> tuple[Output, list[Barrier]]:
        epoch = self._epoch_of(version)
        if blob:  # just unpacked: the operator keeps the rows as they are
            with state_coming_in():
                rows = msgpack.unpackb(blob, raw=False, strict_map_key=False)
            self.operator.put_state(rows, owned=True)  # type: ignore[attr-defined]
        if last:
            epoch.received.add(sender)
        return self._finish_if_done(), []

    def _buffer(self, epoch: Epoch, events: list[Event], port: int) -> list[Event]:
        """Keep back the events of bins whose state has not arrived; the others to run."""
        mask, take, key_fn = self.bins - 1, epoch.take, self.key_fns[port]
        assert key_fn is not None
        mine: list[Event] = []
        wait: list[Event] = []
        for e in events:
            try:
                b = stable_hash(key_fn(e)) & mask
            except Exception:  # the operator reports it
                b = -1
            (wait if b in take else mine).append(e)
        if wait:
            epoch.buffered.append((port, wait))
        return mine

    def _finish_if_done(self) -> Output:
        """End the epoch once every marker is in and this instance's part is done: run
        the buffered events, then release the held watermarks."""
        epoch = self.epoch
        if epoch is None or not epoch.finished(sum(len(p) for p in self.channels)):
            return Output()
        self.epoch = None
        self.done_version = epoch.version
        out = Output()
        for port, events in epoch.buffered:
            _merge(out, self.operator.on_batch(events, port))
        for (port, channel), wm in epoch.held.items():
            _merge(out, self._raise(wm, port, channel))  # a channel that went idle stays so
        for port in range(len(self.channels)) if self.idle_channels else ():
            _merge(out, self.operator.on_watermark(self._port_watermark(port), port))
        return out

    def end_barriers(self) -> list[Barrier]:
        """A retired instance's last word: the end of its stream on every channel out."""
        return [(t, r.port, END_OF_STREAM) for r in self.routes for t in r.targets]


def _merge(into: Output, out: Output) -> None:
    into.events.extend(rows(out.events))
    into.errors.extend(out.errors)
    if out.watermark is not None:
        into.watermark = out.watermark


def frontier_timing(spec: DataflowSpec, step: Any) -> WindowTiming | None:
    """The windows that decide when this step's output is due (None: at once).

    A window's own timing; for a step whose every path to a sink runs through
    a window (the source, filter and map before an aggregation), that window's
    timing too: an event early in a one-second window contributes to a result
    that cannot be produced before the window closes, so its work can wait for
    more urgent work (the Cameo frontier). Watermarks stay barriers in the
    mailbox, so reordering by window never changes results. A process step
    takes no timing from downstream: a user function's outputs may carry any
    event time, so the window they land in is not known from its input.
    """
    own = _window_timing(spec, step)
    if own is not None or isinstance(step, (SinkStep, ProcessStep)):
        return own
    downstream = [frontier_timing(spec, consumer) for consumer, _ in spec.consumers(step.id)]
    known = [t for t in downstream if t is not None]
    if not known or len(known) < len(downstream):
        return None
    return min(known, key=lambda t: t.slide_ms)  # the soonest-firing windows decide


def _window_timing(spec: DataflowSpec, step: Any) -> WindowTiming | None:
    """How the scheduler maps a window step's windows to physical deadlines (None for
    steps that fire nothing at watermarks: an interval join emits a pair as soon as
    both events are in; a process's timers are its user's)."""
    lateness = float(max((s.allowed_lateness_ms for s in spec.sources), default=0))
    if isinstance(step, WindowStep):
        if step.kind == "session":
            return WindowTiming.session_gap(float(step.gap_ms or 0), lateness)
        if step.kind == "sliding":
            return WindowTiming.sliding(float(step.size_ms or 0), float(step.slide_ms or 0), lateness)
        return WindowTiming.tumbling(float(step.size_ms or 0), lateness)
    if isinstance(step, JoinStep):
        if step.kind == "interval":
            return None
        if step.kind == "sliding":
            return WindowTiming.sliding(float(step.size_ms), float(step.slide_ms or 0), lateness)
        return WindowTiming.tumbling(float(step.size_ms), lateness)
    return None
