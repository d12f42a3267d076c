"""Autoscaling, pure: how many instances each scalable step of each dataflow should run.

The runtime measures every step (events in and out, useful time, backlogs), a policy
turns one measurement into a recommendation (`ds2` from true rates, or the `threshold`
baseline) and the `Scaler` makes it safe to act on: warm-up after each action, delayed
scale-down, bounds, pins, deadline awareness and lessees for hot keys. It returns a
`Plan`; the runtime's controller carries it out. Standard library only: no Ray, no
clock (time is passed in as `now` seconds), no sleeps, no threads.
"""

from __future__ import annotations

from .model import (
    Bounds,
    DataflowMeasure,
    Decision,
    Miss,
    Plan,
    ScalingConfigError,
    SourceMeasure,
    StepMeasure,
)
from .policies import (
    POLICIES,
    PolicySettings,
    Recommendation,
    ds2,
    policy_named,
    predicted_busy,
    target_rates,
    threshold,
)
from .scaler import Scaler, ScalingSettings, settings_from_dict

__all__ = [
    "POLICIES", "Bounds", "DataflowMeasure", "Decision", "Miss", "Plan", "PolicySettings",
    "Recommendation", "ScalingConfigError", "Scaler", "ScalingSettings", "SourceMeasure",
    "StepMeasure", "ds2", "policy_named", "predicted_busy", "settings_from_dict", "target_rates",
    "threshold",
]
