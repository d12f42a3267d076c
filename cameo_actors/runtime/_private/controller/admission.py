"""Admission and placement: whether a new dataflow fits beside the running ones
(predicted from their measured rates and costs, `scheduling/admission.py`), the
pool's overload report kept current, and where a new dataflow's instances go."""

from __future__ import annotations

import logging
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.controller.load import LoadTracker
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.executor_api import HostCpu
from cameo_actors.runtime._private.placement import Placement, place
from cameo_actors.runtime.boundary import LIVE_STATES
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import AdmissionRefused
from cameo_actors.scheduling.admission import Prediction, predict

logger = logging.getLogger(__name__)


class Admission:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        #: recent rates and learned costs, and the last overload report made from them
        self.loads = LoadTracker()
        self.overload: dict[str, Any] = {}
        self._missing: set[str] = set()

    def predict(self, spec: DataflowSpec | None) -> Prediction:
        """Whether every running dataflow (and `spec`, as if admitted) meets its target."""
        running = [d for d in self.registry.named(LIVE_STATES)  # the monitor reads unlocked
                   if spec is None or d["name"] != spec.name]
        usable = self.pool.usable()
        capacity, basis = self.loads.capacity(usable)
        new = None if spec is None else self.loads.new(spec.to_dict())
        return predict(capacity, self.loads.running(running), new,
                       headroom=self.config.admission_headroom,
                       executor_ms_per_s=capacity / max(1, len(usable)), capacity_basis=basis)

    def admit(self, spec: DataflowSpec) -> dict[str, Any]:
        """The admission prediction for `spec` (kept with its record); refused with
        `AdmissionRefused` when some target would be missed and the pool says "refuse"."""
        prediction = self.predict(spec)
        verdict = prediction.to_dict()
        misses = [o for o in prediction.outcomes if o.verdict == "misses"]
        verdict["warnings"] = [f"{o.name}: {o.reason}" for o in misses]
        if misses and self.config.admission == "refuse":
            raise AdmissionRefused(
                f"admitting {spec.name!r} is predicted to make "
                f"{', '.join(repr(o.name) for o in misses)} miss {'its' if len(misses) == 1 else 'their'} "
                f"target: " + "; ".join(verdict["warnings"]) + ". Fix: "
                + _fix(prediction, spec.name, len(self.pool.usable())), verdict)
        if misses and self.config.admission == "warn":
            logger.warning("admitted %r although %s", spec.name, "; ".join(verdict["warnings"]))
        return verdict

    def observe(self, now: float, usage: dict[str, Any], cpu: dict[int, HostCpu]) -> None:
        """A sample of the dataflows' rates and costs and of the executors' CPU; the
        overload report made anew."""
        self.loads.observe(now, usage, {d["name"]: d["spec"]
                                        for d in self.registry.named(LIVE_STATES)}, cpu)
        self.report()

    def report(self) -> None:
        """Keep the pool's overload report current; log who starts and stops missing."""
        prediction = self.predict(None)
        self.overload = prediction.to_dict()
        missing = {o.name for o in prediction.misses()}
        for o in prediction.misses():
            if o.name not in self._missing:
                causes = ", ".join(f"{t!r} ({ms:,.0f} ms/s above its share)"
                                   for t, ms in prediction.causes) or "none measured"
                logger.warning("overload: %r misses its target: %s; tenants over their "
                               "share: %s", o.name, o.reason, causes)
        for name in self._missing - missing:
            logger.warning("overload: %r meets its target again", name)
        self._missing = missing

    def place(self, spec: DataflowSpec) -> Placement:
        """Where a new dataflow's instances go: the least loaded executors (shared), or
        executors of its own (isolated)."""
        all_ex = self.pool.usable()
        if not all_ex:
            raise CameoError("every executor of the pool died; restart the service (or the "
                             "pool) to get new ones")
        if self.config.isolation == "shared":
            urgency = self._urgency() if self.config.placement == "targets_apart" else None
            return place(spec, all_ex, dict(self.pool.load), self.config.bins, urgency)
        taken = {i for d in list(self.registry.dataflows.values()) if not d["released"]
                 for i in d["executors"]}
        free = [i for i in all_ex if i not in taken]
        want = self.config.executors_per_dataflow
        if len(free) < want:
            raise CameoError(f"isolated mode: dataflow {spec.name!r} needs {want} dedicated "
                             f"executor(s), {len(free)} free of {len(all_ex)}; cancel a dataflow "
                             "or start the pool with more executors")
        return place(spec, free[:want], {}, self.config.bins)

    def _urgency(self) -> dict[int, float]:
        """Per executor, the sum of 1 / latency target over the dataflows it hosts."""
        out: dict[int, float] = {}
        for d in self.registry.named(LIVE_STATES):
            for ex in set(d["executors"]):
                out[ex] = out.get(ex, 0.0) + 1.0 / d["spec"]["latency_target_ms"]
        return out


def _fix(prediction: Prediction, name: str, have: int) -> str:
    """What would make a refused dataflow fit, in words (`have`: the pool's executors)."""
    ways = []
    if prediction.executors_needed is not None and prediction.executors_needed > have:
        ways.append(f"grow the pool to {prediction.executors_needed} executors (it has "
                    f"{have})")
    if prediction.max_rate_eps is not None:
        ways.append(f"send {name!r} at most {prediction.max_rate_eps:,.0f} events/s "
                    "(scheduling.expected_rate_eps)")
    ways.append("lower the load of the tenants over their share, or submit to a pool whose "
                "admission setting is \"warn\" or \"admit\"")
    return "; or ".join(ways)
