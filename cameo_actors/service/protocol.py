"""The wire protocol of the RPC API: body decoding (JSON or msgpack) with size
limits, and the pydantic models of requests and responses (the OpenAPI schema).

A dataflow spec is checked by the definition layer (`DataflowSpec.from_dict`),
not by a second pydantic copy of it: one set of rules, and its errors name the
step, what was expected, what arrived and the fix.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cameo_actors.dataflow.validate import MAX_LATENCY_TARGET_MS, MAX_NUMBER, NAME_RE
from cameo_actors.operators.columns import ARROW_STREAM, ColumnsRefused, read_stream
from cameo_actors.runtime.boundary import MAX_ADD_EXECUTORS, MAX_BINS, Strategy
from cameo_actors.service.config import DEFAULT_MAX_JSON_DEPTH
from cameo_actors.service.errors import ApiError, refused_columns
from cameo_actors.service.nesting import deeper_than, json_depth
from cameo_actors.service.outputs import MAX_CURSOR_CHARS

JSON_TYPE = "application/json"
MSGPACK_TYPE = "application/msgpack"
_JSON_TYPES = {"application/json", "text/json"}
_MSGPACK_TYPES = {"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"}
#: Deepest nesting of lists and objects a body may have (the service's --max-json-depth).
DEFAULT_MAX_DEPTH = DEFAULT_MAX_JSON_DEPTH


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header ("" when absent)."""
    return (content_type or "").split(";")[0].strip().lower()


def check_length(content_length: str | None, limit: int, what: str) -> None:
    """Refuse a body by its declared length before reading it (413)."""
    if content_length is None:
        return
    try:
        n = int(content_length)
    except ValueError:
        raise ApiError(400, "bad_request", "the Content-Length header is not a number",
                       expected="a byte count", got=content_length,
                       fix="send a valid Content-Length (HTTP clients do this for you)") from None
    if n > limit:
        raise too_large(n, limit, what)


def too_large(n: int | str, limit: int, what: str) -> ApiError:
    return ApiError(413, "too_large", f"the {what} is larger than the service accepts",
                    expected=f"at most {limit} bytes", got=f"{n} bytes",
                    fix=f"send a smaller {what} (split events into batches), or start the "
                        "service with a higher limit")


def too_deep(depth: int | str, limit: int, what: str) -> ApiError:
    return ApiError(400, "too_deep", f"the {what} nests lists and objects deeper than the "
                    "service accepts", expected=f"at most {limit} levels of nesting",
                    got=f"{depth} levels",
                    fix=f"flatten the {what}, or start the service with a higher "
                        "--max-json-depth")


class _NonFinite(ValueError):
    """NaN, Infinity or -Infinity in JSON text (the message is the token)."""


def _refuse_constant(token: str) -> Any:
    raise _NonFinite(token)


def decode_body(raw: bytes, content_type: str | None, what: str,
                max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """JSON (the default) or msgpack bytes -> plain data; 400 / 415 on failure.

    Nesting deeper than `max_depth` is refused (JSON before it is parsed), and so are
    JSON's NaN and Infinity, which Python's parser would otherwise accept.
    """
    kind = media_type(content_type)
    if kind in _MSGPACK_TYPES:
        try:
            data = msgpack.unpackb(raw, raw=False)
        except msgpack.StackError:  # its C unpacker's own limit (1024 levels)
            raise too_deep("more than 1024", max_depth, what) from None
        except Exception as e:  # msgpack raises several unrelated exception types
            raise ApiError(400, "malformed_body", f"the {what} is not valid msgpack",
                           expected=f"a msgpack-encoded {what}", got=f"{type(e).__name__}: {e}",
                           fix=f"encode the {what} with msgpack.packb(..., use_bin_type=True)"
                           ) from None
        depth = deeper_than(data, max_depth)
        if depth is not None:
            raise too_deep(f"more than {depth - 1}", max_depth, what)
        return data
    if kind in _JSON_TYPES or kind == "" or kind.endswith("+json"):
        if not raw.strip():
            raise ApiError(400, "malformed_body", f"the request has no {what}",
                           expected=f"a JSON {what}", got="an empty body",
                           fix=f"send the {what} as the request body")
        depth = json_depth(raw)
        if depth > max_depth:
            raise too_deep(depth, max_depth, what)
        try:
            return json.loads(raw, parse_constant=_refuse_constant)
        except _NonFinite as e:
            raise ApiError(400, "malformed_body", f"the {what} holds {e}, which is not a JSON "
                           "number", expected="finite numbers (JSON has no NaN or Infinity)",
                           got=str(e), fix="send a finite number, or null for no value") from None
        # ValueError: also an integer of more than 4300 digits; RecursionError: deep nesting
        # the scan above let through (it never should).
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ApiError(400, "malformed_body", f"the {what} is not valid JSON",
                           expected=f"a JSON {what}", got=str(e)[:200],
                           fix="check the JSON syntax (quotes, commas, brackets) and that "
                               "integers have at most 4300 digits") from None
    raise ApiError(415, "unsupported_media_type", f"cannot read a {what} sent as {kind!r}",
                   expected=f"Content-Type {JSON_TYPE} or {MSGPACK_TYPE}", got=content_type,
                   fix=f"send the {what} as JSON or msgpack with a matching Content-Type")


def validation_error(e: ValidationError, what: str) -> ApiError:
    """A pydantic error -> a 422 naming the first offending field."""
    first = e.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or what
    return ApiError(422, "invalid_request", f"{what}: {where}: {first.get('msg')}",
                    expected=first.get("msg"), got=first.get("input"),
                    fix=f"correct {where!r}; the schema is in GET /openapi.json")


def parse_model(model: type[BaseModel], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, what) from None


def read_columns(source: str, raw: bytes) -> Any:
    """An Arrow IPC stream body (a `pyarrow.Table`); 400 if it is not one."""
    try:
        return read_stream(source, raw)
    except ColumnsRefused as e:
        raise refused_columns(400, e) from None


def parse_events(data: Any) -> list[dict[str, Any]]:
    """An events body: a list of objects, or {"events": [...]}."""
    if isinstance(data, dict) and set(data) == {"events"}:
        data = data["events"]
    if not isinstance(data, list):
        raise ApiError(422, "invalid_events", "the events body is not a list",
                       expected='a list of event objects, or {"events": [...]}',
                       got=type(data).__name__, fix="wrap the events in a list")
    for i, event in enumerate(data):
        if not isinstance(event, dict):
            raise ApiError(422, "invalid_events", f"event {i} is not an object",
                           expected="an object of field -> value per event",
                           got=f"{type(event).__name__}: {str(event)[:80]}",
                           fix="send each event as a JSON object / msgpack map")
    return data


# -- answers in the format asked for (results and error-output pages) -------------------------
def _first_of(accept: str | None, kinds: set[str]) -> str | None:
    """The first media type of an Accept header that is one of `kinds`."""
    return next((k for k in map(media_type, (accept or "").split(",")) if k in kinds), None)


def wants_arrow(accept: str | None) -> bool:
    """Whether an Accept header's first known type is an Arrow stream."""
    return _first_of(accept, {ARROW_STREAM, *_MSGPACK_TYPES, *_JSON_TYPES}) == ARROW_STREAM


def wants_msgpack(accept: str | None) -> bool:
    """Whether an Accept header prefers msgpack: its first JSON or msgpack type is msgpack."""
    return _first_of(accept, {*_MSGPACK_TYPES, *_JSON_TYPES}) in _MSGPACK_TYPES


def json_safe(data: Any) -> Any:
    """`data` with NaN and the infinities as None: JSON has no number for them (msgpack has)."""
    if isinstance(data, float):
        return data if data == data and data not in (float("inf"), float("-inf")) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):  # an "any" field pushed as msgpack bytes
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(data: Any) -> bytes:
    """Compact JSON that never fails on non-finite floats (they become null)."""
    try:  # the usual case, one pass: no NaN anywhere
        text = json.dumps(data, allow_nan=False, separators=(",", ":"), default=_json_default)
    except ValueError:
        text = json.dumps(json_safe(data), allow_nan=False, separators=(",", ":"),
                          default=_json_default)
    return text.encode("utf-8")


def encode_answer(data: Any, accept: str | None) -> tuple[bytes, str]:
    """(body, media type): msgpack when the Accept header asks for it, else JSON."""
    if wants_msgpack(accept):
        return msgpack.packb(data, use_bin_type=True), MSGPACK_TYPE
    return to_json(data), JSON_TYPE


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


# -- response models (documentation and a check of what the service returns) -----------------
class ErrorDetail(BaseModel):
    code: str
    message: str
    step: str | None = None
    expected: str | None = None
    got: Any = None
    fix: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class Outcome(BaseModel):
    name: str
    tenant: str
    verdict: str = Field(description="meets, at_risk, misses or unknown")
    demand_ms_per_s: float | None = Field(description="executor ms per second it needs")
    allocation_ms_per_s: float | None = Field(description="executor ms per second it gets "
                                                          "(its tenant's floor and what is spare)")
    sustainable_eps: float | None = Field(description="events/s it keeps up with")
    behind_s_per_s: float = Field(description="how much later its results get every second")
    reason: str


class Cause(BaseModel):
    tenant: str = Field(description="a tenant over its weighted share (others' tenants are "
                                    "not named to a tenant token)")
    over_share_ms_per_s: float


class Prediction(BaseModel):
    """Admission control's prediction (docs/service.md, "Admission and overload")."""

    feasible: bool = Field(description="no dataflow is predicted or measured to miss")
    capacity_ms_per_s: float = Field(description="executor ms per second of the pool")
    utilization: float | None = Field(description="known demand / capacity")
    outcomes: list[Outcome]
    causes: list[Cause]
    executors_needed: int | None = Field(description="executors for every known demand to "
                                                     "fit under the pool's headroom")
    max_rate_eps: float | None = Field(description="for a new dataflow: the highest rate that "
                                                   "keeps every target it does not already miss")
    warnings: list[str] = Field(default_factory=list,
                                description="on submit: the dataflows predicted to miss, why")


class SubmitResponse(BaseModel):
    id: str = Field(description="the dataflow's id: its name, unique in the pool")
    name: str
    tenant: str
    created: bool = Field(description="false when the same spec was running already")
    replaced: bool = False
    state: str
    admission: Prediction | None = Field(None, description="admission control's prediction "
                                                           "when it was created")


class DataflowSummary(BaseModel):
    name: str
    tenant: str
    latency_target_ms: float
    state: str = Field(description="running, finishing, finished, cancelled or failed")
    executors: list[int]
    submitted_at: float | None = None
    ended_at: float | None = None


class DataflowList(BaseModel):
    dataflows: list[DataflowSummary]


class Latency(BaseModel):
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None


class Throughput(BaseModel):
    events_in_per_s: float
    events_out_per_s: float
    results_per_s: float
    window_s: float = Field(description="the interval the rates were measured over")


class Transition(BaseModel):
    state: str
    at: float = Field(description="epoch seconds")
    reason: str | None


class DataflowStatus(BaseModel):
    name: str
    tenant: str
    state: str
    latency_target_ms: float
    weight: float
    latency: Latency
    within_target: float | None = Field(description="share of results within the target")
    results: int
    events_in: int
    events_out: int
    throughput: Throughput
    backlog: int
    errors: dict[str, int] = Field(description="error records per 'step:kind'")
    failures: list[str]
    executors: list[int]
    sources: list[str]
    submitted_at: float | None
    ended_at: float | None = None
    cause: str | None = Field(None, description="why it failed")
    exceptions: list[str] = Field([], description="its last operator failures")
    history: list[Transition] = Field([], description="its state changes, oldest first")
    recoveries: int = Field(0, description="times it was restored from a checkpoint after a "
                                           "part of the pool died")
    state_bytes: int = Field(0, description="estimated operator state and unread results")
    held: list[str] = Field([], description="activations held by flow control (e.g. a sink "
                                            "whose result log is full)")
    migrations: list[Migration] = Field([], description="its reconfigurations (running and "
                                                        "recent), oldest first")
    outlook: Outcome | None = Field(None, description="the pool's overload report for it: "
                                                      "whether it meets or will miss its target")
    scaling: DataflowScalingSummary | None = Field(
        None, description="the scaling controller's view of it: each step's parallelism, "
                          "lessees, true rates and busy share, its last decisions (None "
                          "when the controller has not measured it)")


class Migration(BaseModel):
    """A reconfiguration of one keyed step and its progress (the runtime's MigrationInfo)."""

    model_config = ConfigDict(extra="allow")

    id: str
    dataflow: str
    step: str
    kind: str = Field("", description="scale, migrate or move_instance")
    strategy: str = Field("", description="all_at_once, batched or fluid")
    state: str = Field(description="running, done or failed")
    from_parallelism: int = 0
    to_parallelism: int = 0
    bins_total: int = 0
    bins_moved: int = 0
    epochs_total: int = 0
    epochs_done: int = 0
    bytes_moved: int = Field(0, description="operator state moved between instances")
    started_at: float | None = Field(None, description="epoch seconds")
    ended_at: float | None = None
    duration_s: float = 0.0
    error: str | None = Field(None, description="why it failed")


class MigrationList(BaseModel):
    migrations: list[Migration]


class ExecutorsAdded(BaseModel):
    added: list[int] = Field(description="the new executors' indices")


class NodeDrained(BaseModel):
    node: str
    executors: list[int] = Field(description="the executors that were on it, now retired")
    dataflows: list[str] = Field(description="the dataflows restored on the executors left")
    ray_refused: dict[str, str] = Field(
        default_factory=dict, description="node id -> why Ray did not drain it (empty: Ray "
                                          "places nothing new there, and it leaves once idle)")
    seconds: float = Field(description="how long the drain took, checkpoints included")


class ExecutorRemoval(BaseModel):
    model_config = ConfigDict(extra="allow")

    executor: int
    moving: list[str] = Field(description="the instances that move elsewhere, one migration "
                              "each (see /v1/migrations)")
    state: str = Field(description="draining: it leaves once its instances moved")


class _Open(BaseModel):
    """A record of the scaling controller: the fields below are documented, more may come."""

    model_config = ConfigDict(extra="allow")


class StepScaling(_Open):
    """One step of a dataflow, measured over the scaling controller's window (its
    instances summed). True rates are per second of useful time (deserialization,
    processing, serialization): what the step could do unhindered (DS2)."""

    parallelism: int
    scalable: bool = Field(description="a keyed step the controller may scale")
    lessees: int = Field(0, description="lessee instances helping its hot keys")
    events_in_eps: float | None = None
    events_out_eps: float | None = None
    true_processing_eps: float | None = Field(None, description="events one instance "
                                                                "processes per useful second")
    true_output_eps: float | None = None
    busy: float | None = Field(None, description="mean share of time its instances work (0..1)")
    backlog_events: float | None = None


class SourceScaling(_Open):
    rate_eps: float | None = None
    backlog_events: float | None = Field(None, description="events waiting at the writers "
                                                           "(Runtime.report_backlog)")
    backlog_growth_eps: float | None = None


class DataflowScaling(_Open):
    policy: str = Field(description="the dataflow's policy (its own, or the pool's)")
    within_target: float | None = None
    steps: dict[str, StepScaling] = Field(default_factory=dict)
    sources: dict[str, SourceScaling] = Field(default_factory=dict)
    instances: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="per scalable step, each instance's rates, busy "
        "share, useful time split (ms) and queueing delay")


class ScalingDecision(_Open):
    at: float = Field(description="when, in the controller's clock (seconds)")
    dataflow: str
    step: str
    from_parallelism: int
    to_parallelism: int
    policy: str
    reason: str = Field(description="why, with the numbers")
    kind: str = Field("parallelism", description="parallelism or lessees")


class ScalingMiss(_Open):
    dataflow: str
    reason: str


class ScalingFailure(_Open):
    at: float | None = Field(None, description="epoch seconds")
    where: str = Field(description="a dataflow, or pool")
    error: str


class ScalingStatus(_Open):
    """The scaling controller's view: pool-wide for the admin; a tenant sees its own
    dataflows, and not the pool's executors."""

    policy: str = Field(description="the pool's policy")
    enabled: bool = Field(description="some dataflow is scaled (by the pool's policy or its own)")
    executors: int | None = Field(None, description="executors now (admin)")
    wanted_executors: int | None = Field(None, description="executors the last plan wants "
                                                           "(admin)")
    bounds: dict[str, int | None] = Field(default_factory=dict)
    dataflows: dict[str, DataflowScaling] = Field(default_factory=dict)
    decisions: list[ScalingDecision] = Field(default_factory=list, description="the last "
                                             "changes asked for, oldest first")
    misses: list[ScalingMiss] = Field(default_factory=list, description="dataflows the pool "
                                      "cannot serve within their target even at its maximum")
    errors: list[ScalingFailure] = Field(default_factory=list, description="actions that "
                                         "failed (retried later)")


class DataflowScalingSummary(_Open):
    """A dataflow's line of the scaling view, in its status."""

    policy: str
    steps: dict[str, StepScaling] = Field(default_factory=dict)
    decisions: list[ScalingDecision] = Field(default_factory=list)
    misses: list[str] = Field(default_factory=list, description="why it will miss even at "
                                                                "the pool's maximum")
    errors: list[ScalingFailure] = Field(default_factory=list)


class Exceptions(BaseModel):
    name: str
    state: str
    cause: str | None
    exceptions: list[str]


class UpdateResponse(BaseModel):
    name: str
    latency_target_ms: float
    weight: float


class CancelResponse(BaseModel):
    name: str
    state: str
    messages_dropped: int
    ended_before: bool = Field(False, description="it had ended already; what it kept (a "
                                                  "finished dataflow's results) is freed")


class Rejection(BaseModel):
    """An event refused at the edge: msgpack cannot carry it (it is in the error output too)."""

    index: int = Field(description="its position in the request's events")
    field: str | None = Field(description="the field at fault; null when the event as a whole is")
    reason: str = Field(description="what was expected, what arrived, and the fix")


class PushResponse(BaseModel):
    accepted: int = Field(description="events handed to the source; those off its schema go "
                                      "to the error output later (kind malformed)")
    rejected: int = Field(description="events refused here, each alone (kind unencodable in "
                                      "the error output); the others went on")
    rejections: list[Rejection] = Field(description="the first 10 refused events")


class CommitRequest(_Strict):
    """Free the rows of an output before a cursor (the reader kept them)."""

    cursor: str = Field(..., min_length=1, max_length=MAX_CURSOR_CHARS,
                        description="the cursor of a results answer, unchanged")
    sink: str | None = Field(None, description="the sink the cursor is of (checked; optional)")


class ErrorsCommitRequest(_Strict):
    cursor: str = Field(..., min_length=1, max_length=MAX_CURSOR_CHARS,
                        description="the cursor of an errors answer, unchanged")


class ResultItem(BaseModel):
    event: dict[str, Any] = Field(description="the result (non-finite floats are null in JSON)")
    ingest_ms: float | None = Field(description="when the message that made it computable "
                                                "arrived, ms since the epoch")
    egress_ms: float | None = Field(description="when the sink recorded it, ms since the epoch")


class ResultsPage(BaseModel):
    rows: list[ResultItem] = Field(description="in egress order; one sink instance's in its order")
    cursor: str = Field(description="opaque: read on from here, or commit up to here")
    sink: str
    pending: int = Field(description="rows after the cursor when this page was read")


class ErrorItem(BaseModel):
    step: str | None
    kind: str | None = Field(description="malformed, late, user_function, ...")
    message: str | None
    event: Any = Field(description="the record as it arrived at the step")
    ingest_ms: float | None
    egress_ms: float | None


class ErrorsPage(BaseModel):
    rows: list[ErrorItem]
    cursor: str
    pending: int = Field(description="records after the cursor when this page was read")
    skipped: int = Field(description="records between the cursor and this page, dropped "
                                     "unread (the error output keeps a bounded number)")
    dropped: int = Field(description="records dropped unread since the dataflow started")


class CommitResponse(BaseModel):
    cursor: str
    freed: int = Field(description="rows this commit let the runtime forget")
    pending: int = Field(description="rows kept after the cursor")


class TokenCreated(BaseModel):
    id: str
    tenant: str
    created: float
    token: str = Field(description="the secret; shown once, stored only as a hash")


class TokenInfo(BaseModel):
    id: str
    tenant: str
    created: float


class WhoAmI(BaseModel):
    tenant: str | None
    admin: bool
    token_id: str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "malformed body: not JSON or msgpack, NaN or Infinity in JSON, nested too deep"),
        (401, "missing or wrong bearer token"),
        (403, "the token's tenant may not do this"), (404, "no such dataflow for this token"),
        (409, "a different dataflow runs under this name, or a reconfiguration conflicts "
              "with one under way"), (413, "body too large"),
        (415, "neither JSON nor msgpack"), (422, "invalid spec or request"),
        (500, "a bug in the service (internal_error; the traceback is in its log)"),
        (503, "the service is stopping, or the runtime did not answer in time (Retry-After)"))
}


class LatencyPoint(BaseModel):
    """One 1-s snapshot of an explanation's latency."""

    t_ms: float = Field(description="when (epoch ms)")
    results: int
    within: int = Field(description="results within the target")
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class CriticalSegment(BaseModel):
    """What one share of the critical path was spent on."""

    share: float = Field(description="of the critical path (0..1)")
    ms: float | None
    kind: str = Field(description="processing, waiting, transfer, ingest, egress, serialize, "
                                  "deserialize, idle or untraced")
    dataflow: str | None
    step: str | None
    executor: int | None
    from_executor: int | None = Field(description="transfer: the sending executor")
    behind: str | None = Field(description="waiting: the dataflow it waited behind")
    behind_step: str | None
    text: str


class CriticalSummary(BaseModel):
    """Shares of the critical path (0..1) by type, operator, executor, channel, dataflow."""

    by_type: dict[str, float]
    by_operator: dict[str, float] = Field(description='"dataflow/step" -> share')
    by_executor: dict[str, float] = Field(description='"0" -> share')
    by_channel: dict[str, float]
    by_dataflow: dict[str, float]
    waiting_behind: dict[str, float] = Field(description="dataflow waited behind -> share")


class Explanation(BaseModel):
    """Why a dataflow (or the pool) missed or met its target: its critical path over the
    last `last_s` seconds (online critical-path analysis of traced activities). Names of
    dataflows a tenant token may not see are replaced by "another tenant"."""

    dataflow: str | None = Field(description="None: the whole pool")
    last_s: float
    from_ms: float | None = Field(description="epoch ms covered, from")
    to_ms: float | None
    snapshots: int
    activities: int
    latency_target_ms: float | None
    results: int
    within_target: float | None = Field(description="share of traced results within target")
    latency: list[LatencyPoint] = Field(description="one per 1-s snapshot, oldest first")
    operators: dict[str, float] = Field(description="the dataflow's steps' share of its "
                                                    "critical path")
    critical_path: list[CriticalSegment] = Field(description="ranked, largest first")
    late_paths: int = Field(default=0, description="result messages that carried a result "
                                                   "over the target")
    late_path: list[CriticalSegment] = Field(
        default_factory=list, description="the critical path of those alone, ranked")
    summary: CriticalSummary
    words: list[str] = Field(description="the headline, then one line per critical_path entry")
    late_words: list[str] = Field(default_factory=list, description="the same of late_path "
                                                                    "(none if nothing was late)")
    tracing: dict[str, float | int | None] = Field(
        default_factory=dict, description="how tracing keeps up: activities collected and "
        "lost (overwritten before collected), analysed per second of analysis time against "
        "traced per second")
