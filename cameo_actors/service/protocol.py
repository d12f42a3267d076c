"""The wire protocol of the RPC API: body decoding (JSON or msgpack) with size
limits, and the pydantic models of requests and responses (the OpenAPI schema).

A dataflow spec is checked by the definition layer (`DataflowSpec.from_dict`),
not by a second pydantic copy of it: one set of rules, and its errors name the
step, what was expected, what arrived and the fix.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cameo_actors.service.errors import ApiError

JSON_TYPE = "application/json"
MSGPACK_TYPE = "application/msgpack"
_JSON_TYPES = {"application/json", "text/json"}
_MSGPACK_TYPES = {"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"}


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


def decode_body(raw: bytes, content_type: str | None, what: str) -> Any:
    """JSON (the default) or msgpack bytes -> plain data; 400 / 415 on failure."""
    kind = media_type(content_type)
    if kind in _MSGPACK_TYPES:
        try:
            return msgpack.unpackb(raw, raw=False)
        except Exception as e:  # msgpack raises several unrelated exception types
            raise ApiError(400, "malformed_body", f"the {what} is not valid msgpack",
                           expected=f"a msgpack-encoded {what}", got=f"{type(e).__name__}: {e}",
                           fix=f"encode the {what} with msgpack.packb(..., use_bin_type=True)"
                           ) from None
    if kind in _JSON_TYPES or kind == "" or kind.endswith("+json"):
        if not raw.strip():
            raise ApiError(400, "malformed_body", f"the request has no {what}",
                           expected=f"a JSON {what}", got="an empty body",
                           fix=f"send the {what} as the request body")
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ApiError(400, "malformed_body", f"the {what} is not valid JSON",
                           expected=f"a JSON {what}", got=str(e),
                           fix="check the JSON syntax (quotes, commas, brackets)") from None
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


# -- request models --------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UpdateRequest(_Strict):
    """Change a running dataflow's latency target or its tenant weight."""

    latency_target_ms: float | None = Field(None, gt=0, description="new end-to-end target, ms")
    weight: float | None = Field(None, gt=0, description="new share under fair_share")

    @model_validator(mode="after")
    def _something(self) -> UpdateRequest:
        if self.latency_target_ms is None and self.weight is None:
            raise ValueError("give latency_target_ms, weight, or both")
        return self


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


class SubmitResponse(BaseModel):
    id: str = Field(description="the dataflow's id: its name, unique in the pool")
    name: str
    tenant: str
    created: bool = Field(description="false when the same spec was running already")
    replaced: bool = False
    state: str


class DataflowSummary(BaseModel):
    name: str
    tenant: str
    latency_target_ms: float
    state: str
    executors: list[int]


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


class UpdateResponse(BaseModel):
    name: str
    latency_target_ms: float
    weight: float


class CancelResponse(BaseModel):
    name: str
    state: str
    messages_dropped: int


class PushResponse(BaseModel):
    accepted: int


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
        (400, "malformed body"), (401, "missing or wrong bearer token"),
        (403, "the token's tenant may not do this"), (404, "no such dataflow for this token"),
        (409, "a different dataflow runs under this name"), (413, "body too large"),
        (415, "neither JSON nor msgpack"), (422, "invalid spec or request"),
        (503, "the service is stopping"))
}
