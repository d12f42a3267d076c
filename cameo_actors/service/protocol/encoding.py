"""Request bodies in and answers out: media types, size and nesting limits, JSON or
msgpack decoding, events bodies, and answers in the format the client asks for.

No pydantic models here (those are `requests` and `answers`): only bytes and plain data.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgpack
from pydantic import BaseModel, ValidationError

from cameo_actors.operators.column_ipc import ARROW_STREAM, read_stream
from cameo_actors.operators.exceptions import ColumnsRefused
from cameo_actors.service.config import DEFAULT_MAX_JSON_DEPTH
from cameo_actors.service.errors import ApiError, refused_columns
from cameo_actors.service.nesting import deeper_than, json_depth

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

