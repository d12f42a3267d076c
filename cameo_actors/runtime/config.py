"""Runtime configuration: typed, frozen, read once at the edge."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

ISOLATION_MODES = ("shared", "isolated")


@dataclass(frozen=True)
class RuntimeConfig:
    """How the executor pool runs.

    Attributes:
        num_executors: executor actors in the pool; None = one per CPU of the Ray cluster.
        policy: scheduling policy of every executor ("cameo", "fifo", "edf", "sjf",
            "fair_share", "token_bucket", or one registered by the user).
        policy_params: keyword arguments for the policy.
        isolation: "shared" (all dataflows share the pool) or "isolated" (each
            dataflow gets dedicated executors, the slot-per-job style).
        executors_per_dataflow: in isolated mode, executors each dataflow gets.
        quantum_ms: the longest an activation runs before yielding to others.
        credit_events: events in flight per channel before the sender is held.
        ingress_events: events waiting at a source before ingest blocks (backpressure).
        max_message_events: ingress batches are cut into messages of at most this many
            events: the runtime preempts at message boundaries, so this bounds how long
            one bulk message can keep urgent work waiting.
        result_capacity: results kept uncommitted per sink before the sink is held.
        allowed_modules: module prefixes user functions may come from; None = any.
        executor_cpus: CPUs each executor reserves in Ray.
        switch_interval_s: the interpreter's thread switch interval inside executors;
            short, so that Ray's threads hand urgent messages in promptly.
    """

    num_executors: int | None = None
    policy: str = "cameo"
    policy_params: dict[str, Any] = field(default_factory=dict)
    isolation: str = "shared"
    executors_per_dataflow: int = 1
    quantum_ms: float = 5.0
    credit_events: int = 20_000
    ingress_events: int = 20_000
    max_message_events: int = 500
    result_capacity: int = 1_000_000
    allowed_modules: tuple[str, ...] | None = None
    executor_cpus: float = 1.0
    switch_interval_s: float = 0.0005

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"RuntimeConfig.isolation: expected one of {ISOLATION_MODES}, "
                             f"got {self.isolation!r}")
        if self.num_executors is not None and self.num_executors < 1:
            raise ValueError(f"RuntimeConfig.num_executors: expected >= 1 or None, got {self.num_executors}")
        for name in ("quantum_ms", "credit_events", "ingress_events", "max_message_events",
                     "result_capacity"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RuntimeConfig.{name}: expected > 0, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RuntimeConfig:
        d = dict(d)
        if d.get("allowed_modules") is not None:
            d["allowed_modules"] = tuple(d["allowed_modules"])
        return cls(**d)


def default_run_dir() -> str:
    """The project's own run folder for Ray's and Spark's temporary files."""
    return os.path.abspath(os.environ.get("CAMEO_RUN_DIR", ".run"))
