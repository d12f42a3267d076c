"""Deadline-aware scheduling (Cameo, NSDI'21), pure and pluggable.

Every message carries a `PriorityContext`; a `Policy` turns (message,
activation profile, now) into a sort key; each activation's `Mailbox` orders
its own messages (window id, arrival, watermark barriers) and the global
`RunQueue` orders activations by the key of their most urgent message. The
`Scheduler` ties them together for one executor thread; its `TenantFloor`
guarantees each tenant its weighted share under overload. `admission` holds
the model that predicts, for the whole pool, who will miss its target. Standard
library only: no Ray, no OS clock, no sleeps, no threads.
"""

from __future__ import annotations

from .admission import Demand, Outcome, Prediction, fair_allocation, predict
from .context import Feedback, Message, PriorityContext, SortKey
from .exceptions import (
    DuplicateActivationError,
    DuplicatePolicyError,
    PolicyKeyError,
    SchedulingError,
    UnknownActivationError,
    UnknownPolicyError,
)
from .floor import TenantFloor
from .policies import (
    EdfPolicy,
    FairSharePolicy,
    FifoPolicy,
    LeastLaxityPolicy,
    Policy,
    PolicyFactory,
    SjfPolicy,
    TokenBucketPolicy,
    get_policy,
    policy_names,
    register_policy,
    stamp,
)
from .profile import ActivationProfile, DataflowProfile, WindowTiming, window_frontier_ms
from .queues import Mailbox, RunQueue
from .scheduler import Scheduler
from .slices import DRAINED, PREEMPTED, QUANTUM, REMOVED, Execute, SchedulerStats, SliceResult

__all__ = [
    "Demand",
    "Outcome",
    "Prediction",
    "TenantFloor",
    "fair_allocation",
    "predict",
    "DRAINED",
    "PREEMPTED",
    "QUANTUM",
    "REMOVED",
    "ActivationProfile",
    "DataflowProfile",
    "DuplicateActivationError",
    "DuplicatePolicyError",
    "EdfPolicy",
    "Execute",
    "FairSharePolicy",
    "Feedback",
    "FifoPolicy",
    "LeastLaxityPolicy",
    "Mailbox",
    "Message",
    "Policy",
    "PolicyFactory",
    "PolicyKeyError",
    "PriorityContext",
    "RunQueue",
    "Scheduler",
    "SchedulerStats",
    "SchedulingError",
    "SjfPolicy",
    "SliceResult",
    "SortKey",
    "TokenBucketPolicy",
    "UnknownActivationError",
    "UnknownPolicyError",
    "WindowTiming",
    "get_policy",
    "policy_names",
    "register_policy",
    "stamp",
    "window_frontier_ms",
]
