"""An activation: one instance of one operator of one dataflow, hosted on an executor.

It adds to the operator what running on many instances needs: a watermark
per input channel (the minimum over a port's channels is the port's
watermark), and routing of outputs to the instances of downstream steps
(by key group for keyed steps, round robin otherwise, watermarks to all).
Pure: no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec, JoinStep, SinkStep, SourceStep, WindowStep
from cameo_actors.operators.base import END_OF_STREAM, Event, Operator, Output
from cameo_actors.operators.build import build_operator, key_function
from cameo_actors.operators.stateless import DEFAULT_MAX_STRING_CHARS
from cameo_actors.runtime._private.routing import split_by_key
from cameo_actors.runtime.boundary import ActivationId
from cameo_actors.scheduling import WindowTiming

NO_WM = -math.inf


@dataclass(frozen=True)
class Route:
    """Where one output of an activation goes: a downstream step's port and instances."""

    step: str
    port: int
    targets: tuple[str, ...]
    key_fn: Callable[[Event], Any] | None  # set when targets > 1 and the step is keyed


class Activation:
    def __init__(self, spec: DataflowSpec, aid: ActivationId,
                 resolver: FunctionResolver | None = None, *,
                 max_string_chars: int = DEFAULT_MAX_STRING_CHARS) -> None:
        step = spec.step(aid.step)
        instance = aid.instance
        self.aid = aid
        self.id = str(aid)
        self.dataflow = spec.name
        self.step = step
        self.operator: Operator = build_operator(spec, step, resolver,
                                                 max_string_chars=max_string_chars)
        self.is_source = isinstance(step, SourceStep)
        self.is_sink = isinstance(step, SinkStep)
        self.instance = instance
        # Input channels per port: the upstream instances that send here ("" = ingress for sources).
        self.channels: list[dict[str, float]] = [
            {str(ActivationId(spec.name, up, i)): NO_WM
             for i in ([instance] if is_forward(spec.step(up), step) else range(spec.step(up).parallelism))}
            for up in step.inputs
        ] or [{"": NO_WM}]
        self.routes = [self._route(spec, consumer, port) for consumer, port in spec.consumers(step.id)]
        self._round_robin = 0
        self.window_timing = frontier_timing(spec, step)

    def _route(self, spec: DataflowSpec, consumer: Any, port: int) -> Route:
        targets = tuple(str(a) for a in ActivationId.of_step(spec.name, consumer.id,
                                                              consumer.parallelism))
        if is_forward(self.step, consumer):
            return Route(consumer.id, port, (targets[self.instance],), None)
        if _keyed(consumer):
            return Route(consumer.id, port, targets, key_function(spec, self.step.id))
        return Route(consumer.id, port, targets, None)

    # -- input -------------------------------------------------------------------
    def on_data(self, events: list[Event], port: int) -> Output:
        return self.operator.on_batch(events, port)

    def on_watermark(self, watermark: float, port: int, channel: str) -> Output:
        """A channel's watermark; the operator sees the port's minimum when it rises."""
        if self.is_source:  # one channel: the ingress
            return self.operator.on_watermark(watermark, port)
        chans = self.channels[port]
        if watermark <= chans.get(channel, NO_WM):
            return Output()
        chans[channel] = watermark
        return self.operator.on_watermark(min(chans.values()), port)

    # -- output --------------------------------------------------------------------
    def split(self, events: list[Event]) -> list[tuple[str, int, list[Event]]]:
        """Output events -> [(target activation, port, events)]."""
        out: list[tuple[str, int, list[Event]]] = []
        for route in self.routes:
            targets = route.targets
            if len(targets) == 1:
                out.append((targets[0], route.port, events))
            elif route.key_fn is not None:
                for i, part in split_by_key(events, route.key_fn, len(targets)).items():
                    out.append((targets[i], route.port, part))
            else:
                self._round_robin = (self._round_robin + 1) % len(targets)
                out.append((targets[self._round_robin], route.port, events))
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


def _keyed(step: Any) -> bool:
    return isinstance(step, (WindowStep, JoinStep)) and step.parallelism > 1


def is_forward(upstream: Any, consumer: Any) -> bool:
    """Instance i feeds only instance i: same parallelism and no key partitioning.
    Such hops stay on one executor (placement puts instance i of every step
    together) and keep their order, as Flink's forward edges do."""
    return upstream.parallelism == consumer.parallelism and not _keyed(consumer)


def frontier_timing(spec: DataflowSpec, step: Any) -> WindowTiming | None:
    """The windows that decide when this step's output is due (None: at once).

    A window's own timing; for a step whose every path to a sink runs through
    a window (the source, filter and map before an aggregation), that window's
    timing too: an event early in a one-second window contributes to a result
    that cannot be produced before the window closes, so its work can wait for
    more urgent work (the Cameo frontier). Watermarks stay barriers in the
    mailbox, so reordering by window never changes results.
    """
    own = _window_timing(spec, step)
    if own is not None or isinstance(step, SinkStep):
        return own
    downstream = [frontier_timing(spec, consumer) for consumer, _ in spec.consumers(step.id)]
    known = [t for t in downstream if t is not None]
    if not known or len(known) < len(downstream):
        return None
    return min(known, key=lambda t: t.slide_ms)  # the soonest-firing windows decide


def _window_timing(spec: DataflowSpec, step: Any) -> WindowTiming | None:
    """How the scheduler maps a window step's windows to physical deadlines."""
    lateness = float(max((s.allowed_lateness_ms for s in spec.sources), default=0))
    if isinstance(step, WindowStep):
        if step.kind == "session":
            return WindowTiming.session_gap(float(step.gap_ms or 0), lateness)
        if step.kind == "sliding":
            return WindowTiming.sliding(float(step.size_ms or 0), float(step.slide_ms or 0), lateness)
        return WindowTiming.tumbling(float(step.size_ms or 0), lateness)
    if isinstance(step, JoinStep):
        if step.kind == "sliding":
            return WindowTiming.sliding(float(step.size_ms), float(step.slide_ms or 0), lateness)
        return WindowTiming.tumbling(float(step.size_ms), lateness)
    return None
