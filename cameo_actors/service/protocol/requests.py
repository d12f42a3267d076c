"""The request side of the API: the pydantic models of request bodies (each field checked
strictly, a 422 naming it otherwise), the outline of the bodies checked elsewhere (a spec,
an events batch) for the OpenAPI document, and the explain window's parameter.

A dataflow spec is checked by the definition layer (`DataflowSpec.from_dict`), not by a
second pydantic copy of it: one set of rules, and its errors name the step, what was
expected, what arrived and the fix.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cameo_actors.dataflow.validate import MAX_LATENCY_TARGET_MS, MAX_NUMBER, NAME_RE
from cameo_actors.runtime.boundary import MAX_ADD_EXECUTORS, MAX_BINS, Strategy
from cameo_actors.service.errors import ApiError
from cameo_actors.service.outputs import MAX_CURSOR_CHARS

# -- the window of an explanation (?last=60s) -------------------------------------------------
#: The window of `explain` when none is asked for, and the longest one accepted (seconds).
DEFAULT_EXPLAIN_S = 60.0
MAX_EXPLAIN_S = 86_400.0
_UNITS_S = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def parse_last(value: str | None, param: str = "last") -> float:
    """A window length as the API and the CLI take it: seconds ("60"), or a number with a
    unit ("60s", "500ms", "5m", "1h"). Refused (422, naming `param`) unless finite, above
    0 and at most `MAX_EXPLAIN_S`.

    >>> parse_last("60s"), parse_last("60"), parse_last("2m"), parse_last(None)
    (60.0, 60.0, 120.0, 60.0)
    """
    if value is None:
        return DEFAULT_EXPLAIN_S
    text = str(value).strip().lower()
    scale = 1.0
    for unit, factor in _UNITS_S:
        if text.endswith(unit) and not (unit == "s" and text.endswith("ms")):
            text, scale = text[:-len(unit)].strip(), factor
            break
    try:
        seconds = float(text) * scale
    except ValueError:
        seconds = float("nan")
    if not (0.0 < seconds <= MAX_EXPLAIN_S):  # also NaN and the infinities
        raise ApiError(422, "invalid_request", f"{param}: not a window length the service "
                       "explains", expected=f"{param}= seconds above 0 and at most "
                       f"{MAX_EXPLAIN_S:g}, as 60, 60s, 500ms, 5m or 1h", got=str(value)[:80],
                       fix=f"e.g. ?{param}=60s (the last minute)")
    return seconds


# -- the schemas of bodies checked elsewhere (OpenAPI) --------------------------------------
STEP_OPS = ["source", "filter", "map", "flat_map", "key_by", "window", "join", "process", "union",
            "sink"]
#: The spec's outline for the OpenAPI document; the definition layer checks the rest.
SPEC_SCHEMA: dict[str, Any] = {
    "title": "DataflowSpec",
    "description": "A dataflow spec (docs/spec.md). Checked by the definition layer: an error "
                   "names the step, what was expected, what arrived and the fix.",
    "type": "object",
    "required": ["name", "latency_target_ms", "steps"],
    "additionalProperties": False,
    "properties": {
        "version": {"type": "integer", "enum": [1]},
        "name": {"type": "string", "pattern": NAME_RE.pattern},
        "tenant": {"type": "string", "pattern": NAME_RE.pattern, "default": "default"},
        "latency_target_ms": {"type": "number", "exclusiveMinimum": 0},
        "scheduling": {"type": "object", "properties": {
            "weight": {"type": "number", "exclusiveMinimum": 0, "default": 1.0},
            "rate_limit_eps": {"type": ["number", "null"]}}},
        "errors": {"type": ["object", "null"]},
        "steps": {"type": "array", "minItems": 2, "items": {
            "type": "object", "required": ["op", "id"],
            "properties": {"op": {"type": "string", "enum": STEP_OPS},
                           "id": {"type": "string", "pattern": NAME_RE.pattern},
                           "inputs": {"type": "array", "items": {"type": "string"}},
                           "parallelism": {"type": "integer", "minimum": 1}}}},
    },
}
EVENTS_SCHEMA: dict[str, Any] = {
    "oneOf": [{"type": "array", "items": {"type": "object"}},
              {"type": "object", "required": ["events"],
               "properties": {"events": {"type": "array", "items": {"type": "object"}}}}]}


# -- request models --------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def arguments(self) -> dict[str, Any]:
        """The core's keyword arguments: one per field, as parsed."""
        return {name: getattr(self, name) for name in type(self).model_fields}


class UpdateRequest(_Strict):
    """Change a running dataflow's latency target or its tenant weight."""

    # The spec's bounds (validate.check_live_settings); strict: no "30" or true for a number,
    # and no NaN or Infinity (msgpack carries them, and JSON's 1e999 reads as Infinity).
    latency_target_ms: float | None = Field(None, gt=0, lt=MAX_LATENCY_TARGET_MS, strict=True,
                                            allow_inf_nan=False,
                                            description="new end-to-end target, ms")
    weight: float | None = Field(None, gt=0, le=MAX_NUMBER, strict=True, allow_inf_nan=False,
                                 description="new share under fair_share")

    @model_validator(mode="after")
    def _something(self) -> UpdateRequest:
        if self.latency_target_ms is None and self.weight is None:
            raise ValueError("give latency_target_ms, weight, or both")
        return self


#: Bounds of the numbers a reconfiguration names (the runtime checks its own, finer ones):
#: instances of a step (a step has 4096 key bins by default), executors. The strategies,
#: the most bins of a step and the most executors one request adds are the runtime's.
MAX_INSTANCES = 4096
MAX_EXECUTOR_INDEX = 65535
_STEP = Field(..., min_length=1, max_length=128, pattern=NAME_RE.pattern, strict=True,
              description="the keyed step (a window or join after key_by)")
_STRATEGY_DOC = ("all_at_once: one epoch; batched: batch_bins bins per epoch; fluid: one bin "
                 "per epoch")
_BATCH_BINS = Field(None, ge=1, le=MAX_BINS, strict=True,
                    description="bins per epoch with the batched strategy (default: about 8 "
                                "epochs)")


class ScaleRequest(_Strict):
    """Change the parallelism of a keyed step while it runs."""

    step: str = _STEP
    parallelism: int = Field(..., ge=1, le=MAX_INSTANCES, strict=True,
                             description="the step's new number of instances")
    strategy: Strategy = Field("batched", description=_STRATEGY_DOC)
    batch_bins: int | None = _BATCH_BINS


class MigrateRequest(_Strict):
    """Move key bins of a keyed step to another instance (`bins`, `to_instance`), or one
    instance to another executor (`instance`, `to_executor`)."""

    step: str = _STEP
    bins: list[Annotated[int, Field(ge=0, lt=MAX_BINS, strict=True)]] | None = Field(
        None, min_length=1, max_length=MAX_BINS, strict=True,
        description="the key bins to move (with to_instance)")
    to_instance: int | None = Field(None, ge=0, lt=MAX_INSTANCES, strict=True,
                                    description="the instance that takes the bins")
    instance: int | None = Field(None, ge=0, lt=MAX_INSTANCES, strict=True,
                                 description="the instance to move (with to_executor)")
    to_executor: int | None = Field(None, ge=0, le=MAX_EXECUTOR_INDEX, strict=True,
                                    description="the executor that takes the instance")
    strategy: Strategy = Field("batched", description=_STRATEGY_DOC)
    batch_bins: int | None = _BATCH_BINS

    @model_validator(mode="after")
    def _one_move(self) -> MigrateRequest:
        by_bins = self.bins is not None or self.to_instance is not None
        by_instance = self.instance is not None or self.to_executor is not None
        if by_bins == by_instance or (by_bins and (self.bins is None or self.to_instance is None)) \
                or (by_instance and (self.instance is None or self.to_executor is None)):
            raise ValueError("give bins and to_instance, or instance and to_executor")
        return self


class RebalanceRequest(_Strict):
    strategy: Strategy = Field("batched", description=_STRATEGY_DOC)


class AddExecutorsRequest(_Strict):
    count: int = Field(1, ge=1, le=MAX_ADD_EXECUTORS, strict=True,
                       description="executors to start")


#: The longest a scaling window or warm-up may be (seconds): a day.
MAX_SCALING_S = 86_400.0
#: Steps one scaling request may pin or unpin.
MAX_PINS = 256
StepName = Annotated[str, Field(min_length=1, max_length=128, pattern=NAME_RE.pattern,
                                strict=True)]


class DataflowScalingSettings(_Strict):
    """A dataflow's own scaling settings, over the pool's (`RuntimeConfig.scaling`); a key
    left out is the pool's. Types and ranges are checked here; the runtime checks the rest
    against the pool's settings (a policy it knows, min <= max, low < high)."""

    policy: str | None = Field(None, min_length=1, max_length=64, pattern=NAME_RE.pattern,
                               strict=True, description="off, ds2 or threshold")
    min_parallelism: int | None = Field(None, ge=1, le=MAX_INSTANCES, strict=True,
                                        description="fewest instances of a scalable step")
    max_parallelism: int | None = Field(None, ge=1, le=MAX_INSTANCES, strict=True,
                                        description="most instances of a scalable step")
    warmup_s: float | None = Field(None, ge=0, le=MAX_SCALING_S, strict=True,
                                   allow_inf_nan=False,
                                   description="seconds after an action before the next one")
    scale_down_window_s: float | None = Field(
        None, ge=0, le=MAX_SCALING_S, strict=True, allow_inf_nan=False,
        description="a step shrinks only when it could have for this many seconds")
    target_utilization: float | None = Field(None, gt=0, le=1, strict=True, allow_inf_nan=False,
                                             description="ds2: how busy instances may run")
    catch_up_s: float | None = Field(None, gt=0, le=MAX_SCALING_S, strict=True,
                                     allow_inf_nan=False,
                                     description="ds2: work off a backlog within this long")
    high: float | None = Field(None, ge=0, le=1, strict=True, allow_inf_nan=False,
                               description="threshold: add an instance above this busy share")
    low: float | None = Field(None, ge=0, le=1, strict=True, allow_inf_nan=False,
                              description="threshold: remove one below this busy share")
    backlog_events: float | None = Field(None, ge=0, le=MAX_NUMBER, strict=True,
                                         allow_inf_nan=False,
                                         description="threshold: add an instance above this "
                                                     "backlog per instance")
    deadline_aware: bool | None = Field(None, strict=True, description="scale up a step "
                                        "whose dataflow misses its target even when its rates "
                                        "alone would not ask for it")
    lessees: bool | None = Field(None, strict=True, description="lend a hot key's instance "
                                                                 "helpers (lessees)")
    max_lessees: int | None = Field(None, ge=0, le=MAX_INSTANCES, strict=True,
                                    description="most lessees of one step")

    def given(self) -> dict[str, Any]:
        """The keys the caller set (None is not a setting: leave the key out)."""
        return self.model_dump(exclude_none=True)


class ScalingRequest(_Strict):
    """A dataflow's scaling: its own settings (the whole of them: what is left out is the
    pool's; null: the pool's settings again), and steps pinned to a parallelism."""

    settings: DataflowScalingSettings | None = Field(
        ..., description="the dataflow's own settings over the pool's; null: the pool's "
                         "(required, so that leaving it out never resets them by accident)")
    pin: dict[StepName, Annotated[int, Field(ge=1, le=MAX_INSTANCES, strict=True)] | None] = Field(
        default_factory=dict, max_length=MAX_PINS,
        description="step -> the parallelism the policy keeps it at (null: unpinned); "
                    "steps not named keep their pins")

    def arguments(self) -> dict[str, Any]:
        """The settings given (none: the pool's) and the pins, as `ServiceCore.set_scaling`
        takes them."""
        return {"settings": None if self.settings is None else self.settings.given(),
                "pin": dict(self.pin)}


class TokenRequest(_Strict):
    tenant: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$",
                        description="the tenant the new token acts for")


# -- commits of what a reader kept ------------------------------------------------------------
class CommitRequest(_Strict):
    """Free the rows of an output before a cursor (the reader kept them)."""

    cursor: str = Field(..., min_length=1, max_length=MAX_CURSOR_CHARS,
                        description="the cursor of a results answer, unchanged")
    sink: str | None = Field(None, description="the sink the cursor is of (checked; optional)")


class ErrorsCommitRequest(_Strict):
    cursor: str = Field(..., min_length=1, max_length=MAX_CURSOR_CHARS,
                        description="the cursor of an errors answer, unchanged")

