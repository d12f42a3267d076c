"""What the scheduler learns about operator activations and dataflows.

`ActivationProfile` holds an activation's latency target, tenant and weight,
and its learned costs: C_OM per upstream (EWMA of measured execution time),
the watermark cost (window firing), queueing and transfer delays, and C_path
(the most expensive remaining path to the sink, from downstream feedback).
`DataflowProfile` holds the observed source lag of one dataflow, used to map a
window's event-time end to the physical time it can fire (`window_frontier_ms`).

Unknown costs start at 0; the first sample is taken as is and later samples
are blended with weight `alpha`, so estimates converge within a few messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .context import Feedback, Message

_INF = math.inf


def window_frontier_ms(
    window_end_event_ms: float, allowed_lateness_ms: float, observed_lag_ms: float
) -> float:
    """Physical time at which a window can fire: its end, plus lateness, plus source lag.

    Args:
        window_end_event_ms: the window's end in event time (ms).
        allowed_lateness_ms: how long past its end the window waits for late events.
        observed_lag_ms: the dataflow's observed ingest time minus event time.

    Returns:
        The window's frontier time t_MF in physical ms.

    Example:
        >>> window_frontier_ms(10_000.0, 500.0, 20.0)
        10520.0
    """
    return window_end_event_ms + allowed_lateness_ms + observed_lag_ms


def _ewma(old: float | None, sample: float, alpha: float) -> float:
    """`sample` blended into the estimate `old` with weight `alpha`; the first (old None) as is."""
    return sample if old is None else old + alpha * (sample - old)


def _check_ms(name: str, value: float, *, positive: bool = False, finite: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}: expected a number of ms, got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v) or (finite and math.isinf(v)):
        raise ValueError(f"{name}: expected a finite number of ms, got {value!r}")
    if positive and v <= 0:
        raise ValueError(f"{name}: expected > 0, got {value!r}")
    if not positive and v < 0:
        raise ValueError(f"{name}: expected >= 0, got {value!r}")
    return v


@dataclass(frozen=True, slots=True)
class WindowTiming:
    """How a window operator's windows are laid out in event time.

    Windows are `[k * slide, k * slide + size)` for integer k (tumbling when
    slide == size); session windows end `gap` after their last event. The
    window id used as a message's local priority is k (the earliest window an
    event belongs to), or the event time itself for sessions.

    Example:
        >>> w = WindowTiming.tumbling(1000.0)
        >>> w.data_window(2500.0)
        (2.0, 3000.0)
        >>> WindowTiming.sliding(1000.0, 250.0).data_window(2500.0)
        (7.0, 2750.0)
    """

    size_ms: float
    slide_ms: float = 0.0  # 0 = tumbling (slide == size)
    allowed_lateness_ms: float = 0.0
    session: bool = False

    def __post_init__(self) -> None:
        _check_ms("WindowTiming.size_ms", self.size_ms, positive=True)
        _check_ms("WindowTiming.slide_ms", self.slide_ms)
        _check_ms("WindowTiming.allowed_lateness_ms", self.allowed_lateness_ms)
        if self.slide_ms == 0:
            object.__setattr__(self, "slide_ms", float(self.size_ms))

    @classmethod
    def tumbling(cls, size_ms: float, allowed_lateness_ms: float = 0.0) -> WindowTiming:
        """Back-to-back windows of `size_ms`."""
        return cls(size_ms, size_ms, allowed_lateness_ms)

    @classmethod
    def sliding(
        cls, size_ms: float, slide_ms: float, allowed_lateness_ms: float = 0.0
    ) -> WindowTiming:
        """Windows of `size_ms` starting every `slide_ms`."""
        if slide_ms <= 0:
            raise ValueError(f"WindowTiming.sliding: expected slide_ms > 0, got {slide_ms!r}")
        return cls(size_ms, slide_ms, allowed_lateness_ms)

    @classmethod
    def session_gap(cls, gap_ms: float, allowed_lateness_ms: float = 0.0) -> WindowTiming:
        """Session windows that close `gap_ms` after their last event."""
        return cls(gap_ms, gap_ms, allowed_lateness_ms, session=True)

    def data_window(self, event_ms: float) -> tuple[float, float]:
        """(window id, window end in event time) of the earliest window holding `event_ms`."""
        if self.session:
            return event_ms, event_ms + self.size_ms
        k = math.floor((event_ms - self.size_ms) / self.slide_ms) + 1
        return float(k), k * self.slide_ms + self.size_ms

    def closing_window_end(self, previous_watermark_ms: float, watermark_ms: float) -> float:
        """Event-time end of the earliest window a watermark advance closes (or next closes).

        Windows whose `end + allowed_lateness` lies in `(previous, watermark]`
        fire on this watermark; the earliest of them sets the urgency. With no
        earlier watermark, the latest window the watermark closes is used.
        """
        lat = self.allowed_lateness_ms
        if self.session:
            # Session ends are data dependent: take the earliest possible one.
            base = previous_watermark_ms if previous_watermark_ms > -_INF else watermark_ms
            return base - lat
        if previous_watermark_ms == -_INF:
            k = math.floor((watermark_ms - lat - self.size_ms) / self.slide_ms)
        else:
            k = math.floor((previous_watermark_ms - lat - self.size_ms) / self.slide_ms) + 1
        return k * self.slide_ms + self.size_ms


#: A window's input channel whose watermarks stopped this long ago (idle, or gone after a
#: rescale) no longer counts towards when windows fire.
CHANNEL_HORIZON_MS = 2_000.0


class DataflowProfile:
    """Per-dataflow observations shared by its activations on one scheduler.

    The lag maps a window's end to the physical time it can fire (`window_frontier_ms`).
    A window fires when its slowest input channel's watermark passes the end, so once
    watermarks have reached a window here the lag is that channel's: per channel into a
    window, an EWMA of (ingest time - watermark) of its watermarks, and the largest of
    those heard from in `CHANNEL_HORIZON_MS`. (A watermark carries the ingest time of the
    call that raised it.) Until then, and on a scheduler that hosts no window of the
    dataflow, an EWMA of (ingest time - event time) of its data. (With inputs whose event
    times progress apart, sources or partitions read at different lags, that blend swung
    with whichever input came last, and every window deadline stamped meanwhile with it:
    one window's work reordered against the next's.)

    Attributes:
        dataflow: the dataflow id.
        lag_ms: the lag windows fire at, 0 until seen.
        samples: how many lag samples were taken (data and watermarks).

    Example:
        >>> p = DataflowProfile("df1")
        >>> p.observe_lag(40.0); p.observe_lag(60.0); round(p.lag_ms, 1)
        44.0
        >>> p.observe_closing("map#0", 20.0, 1_000.0); p.observe_closing("map#1", 700.0, 1_010.0)
        >>> p.lag_ms  # the channel 700 ms behind decides when windows fire
        700.0
        >>> p.observe_closing("map#0", 20.0, 3_500.0); p.lag_ms  # map#1 went quiet
        20.0
    """

    __slots__ = ("dataflow", "lag_ms", "samples", "alpha", "_data_lag", "_channels")

    def __init__(self, dataflow: str, alpha: float = 0.2) -> None:
        self.dataflow = dataflow
        self.lag_ms = 0.0
        self.samples = 0
        self.alpha = alpha
        self._data_lag: float | None = None
        self._channels: dict[str, tuple[float, float]] = {}  # channel -> (lag EWMA, last heard)

    def observe_lag(self, lag_ms: float) -> None:
        """Blend one (ingest - event time) sample of data into the lag estimate."""
        self._data_lag = _ewma(self._data_lag, lag_ms, self.alpha)
        self.samples += 1
        if not self._channels:
            self.lag_ms = self._data_lag

    def observe_closing(self, channel: str, lag_ms: float, now_ms: float) -> None:
        """One (ingest - watermark) sample of a watermark into a window, on `channel`."""
        old = self._channels.get(channel)
        self._channels[channel] = (_ewma(old[0] if old else None, lag_ms, self.alpha), now_ms)
        self.samples += 1
        heard = now_ms - CHANNEL_HORIZON_MS
        for gone in [c for c, (_, at) in self._channels.items() if at < heard]:
            del self._channels[gone]
        self.lag_ms = max(lag for lag, _ in self._channels.values())


class ActivationProfile:
    """Static settings and learned costs of one operator activation.

    Learned values (all ms, all EWMA with weight `alpha`, 0 until measured):
    `cost_ms(upstream)` (C_OM for data from that upstream), the watermark cost
    (`cost_ms(upstream, watermark=True)`, where windows fire), `queue_delay_ms`,
    `transfer_delay_ms(upstream)` and `path_cost_ms` (C_path: max over the
    latest feedback of each downstream).

    Attributes:
        activation_id: id of the activation.
        dataflow: the dataflow it belongs to.
        tenant: the tenant that owns the dataflow.
        latency_target_ms: the dataflow's end-to-end latency target L.
        weight: the tenant's share weight (fair_share).
        window: window layout for window operators, None for regular operators.
        flow: the dataflow's shared `DataflowProfile` (source lag).
        path_cost_ms: C_path.
        queue_delay_ms: EWMA of time messages waited in this mailbox.
        input_watermark_ms: the largest watermark that arrived (window frontier tracking).
        messages: messages executed.
        busy_ms: total measured execution time.
        late_starts: messages that started after their stamped start deadline.

    Example:
        >>> p = ActivationProfile("df1/sum#0", dataflow="df1", tenant="acme",
        ...                       latency_target_ms=100.0)
        >>> p.observe_execution("df1/map#0", False, 2.0, 0.5)
        >>> p.apply_feedback(Feedback("df1/sink#0", 4.0))
        >>> (p.cost_ms("df1/map#0"), p.path_cost_ms, p.feedback_for("df1/map#0").path_cost_ms)
        (2.0, 4.0, 6.0)
    """

    __slots__ = (
        "activation_id",
        "dataflow",
        "tenant",
        "latency_target_ms",
        "weight",
        "window",
        "flow",
        "alpha",
        "path_cost_ms",
        "queue_delay_ms",
        "input_watermark_ms",
        "messages",
        "busy_ms",
        "late_starts",
        "_cost",
        "_wm_cost",
        "_wm_n",
        "_transfer",
        "_path",
    )

    def __init__(
        self,
        activation_id: str,
        *,
        dataflow: str,
        tenant: str,
        latency_target_ms: float,
        weight: float = 1.0,
        window: WindowTiming | None = None,
        flow: DataflowProfile | None = None,
        alpha: float = 0.2,
    ) -> None:
        if not isinstance(activation_id, str) or not activation_id:
            raise TypeError(f"activation_id: expected a non-empty str, got {activation_id!r}")
        if not isinstance(dataflow, str) or not isinstance(tenant, str):
            raise TypeError(f"dataflow and tenant: expected str, got {dataflow!r}, {tenant!r}")
        _check_ms("latency_target_ms", latency_target_ms, positive=True, finite=False)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise TypeError(f"weight: expected a number, got {weight!r}")
        if not (0 < weight < _INF):
            raise ValueError(f"weight: expected a finite number > 0, got {weight!r}")
        if window is not None and not isinstance(window, WindowTiming):
            raise TypeError(f"window: expected a WindowTiming or None, got {window!r}")
        if not (0 < alpha <= 1):
            raise ValueError(f"alpha: expected 0 < alpha <= 1, got {alpha!r}")
        if flow is not None and flow.dataflow != dataflow:
            raise ValueError(f"flow: belongs to dataflow {flow.dataflow!r}, not {dataflow!r}")
        self.activation_id = activation_id
        self.dataflow = dataflow
        self.tenant = tenant
        self.latency_target_ms = float(latency_target_ms)
        self.weight = float(weight)
        self.window = window
        self.flow = flow if flow is not None else DataflowProfile(dataflow, alpha)
        self.alpha = float(alpha)
        self.path_cost_ms = 0.0
        self.queue_delay_ms = 0.0
        self.input_watermark_ms = -_INF
        self.messages = 0
        self.busy_ms = 0.0
        self.late_starts = 0
        self._cost: dict[str, float] = {}  # upstream -> C_OM; absent until measured
        self._wm_cost = 0.0
        self._wm_n = 0
        self._transfer: dict[str, float] = {}
        self._path: dict[str, float] = {}

    def __repr__(self) -> str:
        return (
            f"ActivationProfile({self.activation_id!r}, L={self.latency_target_ms}, "
            f"costs={self._cost}, wm_cost={self._wm_cost:.3g}, path={self.path_cost_ms:.3g})"
        )

    # -- costs ------------------------------------------------------------------
    def cost_ms(self, upstream: str = "", watermark: bool = False) -> float:
        """C_OM: recent average execution time of a message from `upstream` (0 if unknown).

        Watermarks are costed apart from data (across upstreams) because a
        window operator does its real work, firing, on the watermark.
        """
        if watermark:
            return self._wm_cost
        return self._cost.get(upstream, 0.0)

    def observe_execution(
        self, upstream: str, watermark: bool, cost_ms: float, queue_delay_ms: float
    ) -> None:
        """Blend one measured execution (cost, and the wait before it) into the estimates."""
        a = self.alpha
        if watermark:
            self._wm_cost = _ewma(self._wm_cost if self._wm_n else None, cost_ms, a)
            self._wm_n += 1
        else:
            self._cost[upstream] = _ewma(self._cost.get(upstream), cost_ms, a)
        # `messages` counts the queue-delay samples too: one per execution.
        self.queue_delay_ms = _ewma(
            self.queue_delay_ms if self.messages else None, queue_delay_ms, a
        )
        self.messages += 1
        self.busy_ms += cost_ms

    def observe_transfer(self, upstream: str, delay_ms: float) -> None:
        """Blend one measured transfer delay (arrival - send time) from `upstream`."""
        if delay_ms < 0:  # clocks of two processes disagree a little; never learn a gain
            delay_ms = 0.0
        self._transfer[upstream] = _ewma(self._transfer.get(upstream), delay_ms, self.alpha)

    def transfer_delay_ms(self, upstream: str) -> float:
        """Recent average transfer delay of messages from `upstream` (0 if unknown)."""
        return self._transfer.get(upstream, 0.0)

    # -- feedback ---------------------------------------------------------------
    def apply_feedback(self, feedback: Feedback) -> None:
        """Take a downstream's report; C_path becomes the max over downstreams."""
        c = feedback.path_cost_ms
        if isinstance(c, bool) or not isinstance(c, int | float) or not (0 <= c < _INF):
            raise ValueError(
                f"Feedback from {feedback.from_activation!r}: expected a finite "
                f"path_cost_ms >= 0, got {c!r}"
            )
        old = self._path.get(feedback.from_activation)
        self._path[feedback.from_activation] = c
        if c >= self.path_cost_ms:
            self.path_cost_ms = c
        elif old is not None and old >= self.path_cost_ms:
            # The previous maximum shrank: recompute (few downstreams).
            self.path_cost_ms = max(self._path.values())

    def forget_downstream(self, activation_id: str) -> None:
        """Drop a removed downstream's report from C_path."""
        if self._path.pop(activation_id, None) is not None:
            self.path_cost_ms = max(self._path.values(), default=0.0)

    def feedback_for(self, upstream: str) -> Feedback:
        """The feedback this activation sends to `upstream`.

        path_cost = C_path + cost for that upstream's messages (or the
        watermark cost, whichever is larger: results may ride on either) +
        transfer delay from that upstream. Not the queueing delay: waiting is
        what the schedule decides, and counting it feeds back: a congested
        downstream would make its upstreams more urgent, which congests it more.
        """
        cost = self._cost.get(upstream, 0.0)
        if self._wm_cost > cost:
            cost = self._wm_cost
        return Feedback(
            self.activation_id,
            self.path_cost_ms + cost + self._transfer.get(upstream, 0.0),
        )

    # -- frontier ---------------------------------------------------------------
    def frontier(self, msg: Message) -> tuple[float, float]:
        """(t_MF, local priority) of `msg` at this activation; reads, changes nothing.

        Regular operators: the message's ingest time, and its local priority
        as it came. Window operators: the physical time the message's window
        can fire, with the window id as local priority; a watermark inherits
        the frontier of the earliest window it closes (end of stream: its
        ingest time), measured from the input watermark recorded so far
        (`observe_watermark`, called once the watermark is stamped).

        Example:
            >>> p = ActivationProfile("w", dataflow="d", tenant="t", latency_target_ms=10.0,
            ...                       window=WindowTiming.tumbling(100.0))
            >>> p.frontier(Message.ingress("w", [{}], dataflow="d", tenant="t",
            ...                            ingest_ms=260.0, event_ms=250.0))
            (300.0, 2.0)
        """
        ctx = msg.ctx
        w = self.window
        if w is None:
            return ctx.ingest_ms, ctx.local_priority
        if msg.is_watermark:
            if msg.payload.__class__ is list:  # an in-band control message: due like its cause
                return ctx.ingest_ms, ctx.local_priority
            wm = float(msg.payload)
            prev = self.input_watermark_ms
            if wm == _INF or prev == _INF:  # end of stream (on this or another channel)
                return ctx.ingest_ms, ctx.local_priority
            end = w.closing_window_end(prev, wm)
            return end + w.allowed_lateness_ms + self.flow.lag_ms, ctx.local_priority
        ev = ctx.event_ms
        if not (-_INF < ev < _INF):
            return ctx.ingest_ms, ctx.local_priority
        wid, end = w.data_window(ev)
        return end + w.allowed_lateness_ms + self.flow.lag_ms, wid

    def observe_watermark(self, msg: Message, now_ms: float) -> None:
        """Record the watermark `msg` carries, arrived at `now_ms`; window operators keep the
        largest (`frontier`), and the lag of its channel (`DataflowProfile.observe_closing`)."""
        w = self.window
        if w is not None and msg.payload.__class__ is not list:  # not a control
            wm = float(msg.payload)
            if wm > self.input_watermark_ms:
                self.input_watermark_ms = wm
            if -_INF < wm < _INF:
                self.flow.observe_closing(msg.upstream, msg.ctx.ingest_ms - wm - w.allowed_lateness_ms,
                                          now_ms)

    def frontier_ms(self, msg: Message) -> float:
        """t_MF of `msg` at this activation, in one step: `frontier`, then record it.

        Also records a watermark (`observe_watermark`) and sets a window
        data message's local priority to its window id, as `Scheduler.enqueue`
        does with the stamp.
        """
        f, msg.ctx.local_priority = self.frontier(msg)
        if msg.is_watermark:
            self.observe_watermark(msg, msg.ctx.ingest_ms)
        return f
