"""The records that cross the scaling package's boundary: what the runtime measured, the
bounds it must respect, and the plan it gets back. Plain frozen data, no logic beyond
the rates DS2 reads off a measurement."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from cameo_actors.errors import UserError


class ScalingConfigError(UserError):
    """A scaling setting that cannot work, refused when the setting is built.

    Built from its parts like every `UserError` (`subject` is the setting's dotted name),
    or from one finished sentence:

    >>> str(ScalingConfigError("scaling.min_executors", "<= max_executors (2)", 5,
    ...                        "raise max_executors or lower min_executors"))
    'scaling.min_executors: expected <= max_executors (2), got 5. Fix: raise max_executors or lower min_executors'
    >>> str(ScalingConfigError("pin 'x': expected a keyed step, got 'm'. Fix: pin 'w'"))
    "pin 'x': expected a keyed step, got 'm'. Fix: pin 'w'"
    """

    def __init__(self, subject: str | None, expected: str = "", got: object = None,
                 fix: str = "") -> None:
        if expected:
            super().__init__(subject, expected, got, fix)
        else:  # one finished sentence (pickles back the same way: see UserError.__reduce__)
            self.subject, self.expected, self.got, self.fix = subject, "", None, ""
            Exception.__init__(self, subject)


def check(ok: bool, name: str, expected: str, got: object, fix: str) -> None:
    """Raise a ScalingConfigError about setting `name` unless `ok`."""
    if not ok:
        raise ScalingConfigError(f"scaling.{name}", expected, got, fix)


def is_number(x: object) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class StepMeasure:
    """One step of a running dataflow, measured over the last interval (all instances summed).

    Useful time is deserialization + processing + serialization: time spent waiting on
    input or on a full downstream is not useful, so rates per useful second are what the
    step could do unhindered (DS2's "true" rates).

    Example:
        >>> w = StepMeasure("w", ("m",), 2, True, events_in_eps=2_000.0,
        ...                 events_out_eps=100.0, useful_ms_per_s=2_000.0)
        >>> w.true_processing_eps, w.selectivity, w.busy
        (1000.0, 0.05, 1.0)
    """

    step: str
    inputs: tuple[str, ...]
    parallelism: int
    scalable: bool
    events_in_eps: float
    events_out_eps: float
    useful_ms_per_s: float
    backlog_events: float = 0.0
    instance_busy: tuple[float, ...] = ()
    lessees: int = 0  # lessee instances it runs now (Dirigo)

    @property
    def true_processing_eps(self) -> float | None:
        """Events one instance processes per useful second; None before any useful time."""
        if self.useful_ms_per_s <= 0:
            return None
        return self.events_in_eps / (self.useful_ms_per_s / 1000.0)

    @property
    def true_output_eps(self) -> float | None:
        """Events one instance emits per useful second; None before any useful time."""
        if self.useful_ms_per_s <= 0:
            return None
        return self.events_out_eps / (self.useful_ms_per_s / 1000.0)

    @property
    def selectivity(self) -> float | None:
        """Events out per event in; None before any input."""
        if self.events_in_eps <= 0:
            return None
        return self.events_out_eps / self.events_in_eps

    @property
    def busy(self) -> float:
        """Mean share of wall time its instances spend on useful work (0..1)."""
        if self.instance_busy:
            return sum(self.instance_busy) / len(self.instance_busy)
        return self.useful_ms_per_s / 1000.0 / max(1, self.parallelism)


@dataclass(frozen=True)
class SourceMeasure:
    """One source: what got in, and what is waiting to (so the offered rate is known even
    when backpressure holds the source back)."""

    step: str
    rate_eps: float
    backlog_events: float = 0.0
    backlog_growth_eps: float = 0.0


@dataclass(frozen=True)
class DataflowMeasure:
    """One running dataflow: its steps (any order; `inputs` are the graph's edges), its
    sources, and how its recent results fared against its latency target."""

    name: str
    tenant: str
    latency_target_ms: float
    steps: tuple[StepMeasure, ...]
    sources: tuple[SourceMeasure, ...]
    p99_ms: float | None = None
    within_target: float | None = None
    #: its rates are still changing, or an action on it is under way: it keeps its plan
    #: this round (its needs still count for the pool's size)
    hold: bool = False

    @property
    def misses_target(self) -> bool:
        """Fewer than 99% of recent results within target, or the p99 above it."""
        return ((self.within_target is not None and self.within_target < 0.99)
                or (self.p99_ms is not None and self.p99_ms > self.latency_target_ms))


@dataclass(frozen=True)
class Bounds:
    """What the scaler may ask for: executors in the pool, instances per scalable step.

    >>> Bounds(min_executors=5, max_executors=2)
    Traceback (most recent call last):
    ...
    cameo_actors.scaling.model.ScalingConfigError: scaling.min_executors: expected <= max_executors (2), got 5. Fix: raise max_executors or lower min_executors
    """

    min_executors: int = 1
    max_executors: int = 8
    min_parallelism: int = 1
    max_parallelism: int = 8

    def __post_init__(self) -> None:
        for name in ("min_executors", "max_executors", "min_parallelism", "max_parallelism"):
            value = getattr(self, name)
            check(type(value) is int and value >= 1, name, "an int >= 1", value,
                  f"set {name} to a whole number such as 1")
        for what in ("executors", "parallelism"):
            low, high = getattr(self, f"min_{what}"), getattr(self, f"max_{what}")
            check(low <= high, f"min_{what}", f"<= max_{what} ({high})", low,
                  f"raise max_{what} or lower min_{what}")


@dataclass(frozen=True)
class Decision:
    """One change the scaler asks for, with the sentence that explains it.

    `kind` is "parallelism" (instances of the step) or "lessees" (its lessee instances).
    """

    at: float
    dataflow: str
    step: str
    from_parallelism: int
    to_parallelism: int
    policy: str
    reason: str
    kind: str = "parallelism"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the service's and the benchmark's record of it)."""
        return asdict(self)


@dataclass(frozen=True)
class Miss:
    """A dataflow the pool cannot give what it needs, and why (with the numbers)."""

    dataflow: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What to run at: every scalable step of every measured dataflow (changed or not),
    the pool's size, the changes alone, who will miss, and lessees wanted per hot step."""

    parallelism: dict[str, dict[str, int]]
    executors: int
    decisions: tuple[Decision, ...]
    misses: tuple[Miss, ...] = ()
    lessees: dict[str, dict[str, int]] = field(default_factory=dict)
