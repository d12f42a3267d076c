"""The client's side of the wire: one HTTP connection to the service, each operation's
request encoded (JSON, msgpack or Arrow), its answer decoded, a refusal raised again as the
`ServiceError` the service sent, and answers checked to be of the shape the client promises.

>>> as_object({"state": "running"}, "status")["state"]
'running'
"""

from __future__ import annotations

import json
import os
from typing import Any, TypeGuard, TypeVar

import httpx
import msgpack
import pyarrow as pa

from cameo_actors.errors import SpecError
from cameo_actors.operators.column_ipc import ARROW_STREAM, to_ipc
from cameo_actors.service.config import DEFAULT_URL, ClientConfig
from cameo_actors.service.errors import ApiError
from cameo_actors.service.operations import Operation

#: Pages of results come as msgpack (compact; NaN kept), JSON still accepted.
MSGPACK_ACCEPT = "application/msgpack, application/json;q=0.5"

#: What the client raises when the service refuses a request (status 0: unreachable).
ServiceError = ApiError

T = TypeVar("T")


def service_url(config: ClientConfig | None = None, run_dir: str | None = None) -> str:
    """The URL given, else the one a local `cameo serve` wrote in its state folder."""
    if config and config.url != DEFAULT_URL:
        return config.url
    path = os.path.join(run_dir or os.environ.get("CAMEO_RUN_DIR", ".run"), "service",
                        "service.json")
    try:
        with open(path, encoding="utf-8") as f:
            return str(json.load(f)["url"])
    except (OSError, ValueError, KeyError):
        return DEFAULT_URL


class Transport:
    """One HTTP connection to a service, with the bearer token on every request.

    Args:
        url: the service's address.
        token: the bearer token ("" or None: none sent).
        timeout_s: seconds per request.
        http: an httpx.Client to use instead of a new one (tests pass FastAPI's TestClient).
    """

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 30.0,
                 http: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http is not None:
            http.headers.update(headers)
            self.http = http
        else:
            self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def send(self, op: Operation, *, body: Any = None, params: dict[str, Any] | None = None,
             use_msgpack: bool = False, accept: str | None = None, path: dict[str, Any]
             ) -> Any:
        """`op`'s request with its path parameters, query parameters and body; returns the
        answer decoded (JSON, msgpack, an Arrow page, or text for a text operation)."""
        headers: dict[str, str] = {"Accept": accept} if accept else {}
        content: bytes | None = None
        if isinstance(body, (pa.Table, pa.RecordBatch)):  # events as columns
            content, body = to_ipc(body), None
            headers["Content-Type"] = ARROW_STREAM
        if body is not None:
            if use_msgpack:
                try:
                    content = msgpack.packb(body, use_bin_type=True)
                    headers["Content-Type"] = "application/msgpack"
                except OverflowError:  # an int beyond 64 bits: JSON carries it, and the
                    use_msgpack = False  # service refuses that event alone, with the reason
            if not use_msgpack:
                content = json.dumps(body).encode("utf-8")
                headers["Content-Type"] = "application/json"
        try:
            r = self.http.request(op.method, op.url(**path), content=content, headers=headers,
                                  params=params)
        except httpx.TransportError as e:
            raise ServiceError(0, "unreachable", f"cannot reach the cameo service at {self.url} "
                               f"({type(e).__name__}: {e})",
                               fix="start it with `cameo serve`, or point --url / CAMEO_URL at "
                                   "it") from None
        if r.status_code >= 400:
            raise refusal(r)
        if op.answer == "text":
            return r.text
        kind = r.headers.get("content-type", "")
        if kind.startswith("application/msgpack"):
            return msgpack.unpackb(r.content, raw=False)
        if kind.startswith(ARROW_STREAM):  # a page's rows; the rest of the page in headers
            page: dict[str, Any] = {k.lower().removeprefix("cameo-"): v
                                    for k, v in r.headers.items()
                                    if k.lower().startswith("cameo-")}
            if "pending" in page:
                page["pending"] = int(page["pending"])
            return {**page, "rows": pa.ipc.open_stream(pa.py_buffer(r.content)).read_all()}
        return r.json() if r.content else None


def refusal(r: httpx.Response) -> Exception:
    """The error an answer of status 4xx or 5xx carries: the definition layer's `SpecError`
    for an invalid spec (as a local build raises it), else a `ServiceError`."""
    try:
        e = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        return ServiceError(r.status_code, "http_error", r.text[:200] or r.reason_phrase)
    if e.get("code") == "invalid_spec" and e.get("expected") is not None:
        return SpecError(e.get("step"), e["expected"], e.get("got"), e.get("fix") or "")
    return ServiceError(r.status_code, e.get("code", "error"), e.get("message", ""),
                        expected=e.get("expected"), got=e.get("got"), fix=e.get("fix"),
                        step=e.get("step"))


# -- answers, checked to be the shape a typed method returns ------------------------------------
def unexpected(what: str, expected: str, value: object) -> ServiceError:
    """The error for an answer of another shape than the operation's (another version?)."""
    return ServiceError(502, "unexpected_answer", f"{what}: the service's answer is not "
                        "what this client expects", expected=expected,
                        got=type(value).__name__,
                        fix="use a client of the service's version (GET /v1/info)")


def as_object(value: object, what: str) -> dict[str, Any]:
    """An answer that is a JSON object."""
    if isinstance(value, dict):
        return value
    raise unexpected(what, "an object", value)


def as_list(value: object, what: str) -> list[Any]:
    """An answer that is a JSON list."""
    if isinstance(value, list):
        return value
    raise unexpected(what, "a list", value)


def as_objects(value: object, what: str) -> list[dict[str, Any]]:
    """An answer that is a list of JSON objects."""
    items = as_list(value, what)
    return [as_object(item, what) for item in items]


def as_text(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    raise unexpected(what, "text", value)


def _has_keys(value: object, record: type[T]) -> TypeGuard[T]:
    """Whether `value` is a dict with every key the TypedDict `record` requires."""
    required: frozenset[str] = getattr(record, "__required_keys__", frozenset())
    return isinstance(value, dict) and required <= value.keys()


def as_record(value: object, record: type[T], what: str) -> T:
    """An answer that is one of the runtime's records (a TypedDict of `runtime.boundary`):
    an object with each key the record requires."""
    if _has_keys(value, record):
        return value
    raise unexpected(what, f"a {record.__name__} object", value)


def as_records(value: object, record: type[T], what: str) -> list[T]:
    """An answer that is a list of the runtime's records."""
    return [as_record(item, record, what) for item in as_list(value, what)]


def unwrap(value: object, key: str, what: str) -> object:
    """`value[key]` of an answer that is an object wrapping its result ({"migrations": ...})."""
    answer = as_object(value, what)
    if key in answer:
        return answer[key]
    raise unexpected(what, f"an object with {key!r}", value)
