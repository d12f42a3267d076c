"""The Python client of the cameo service (what the CLI uses).

>>> from cameo_actors import Dataflow
>>> from cameo_actors.service.client import Client
>>> c = Client("http://127.0.0.1:8470", token="...")              # doctest: +SKIP
>>> c.submit(Dataflow("errors", latency_target_ms=50, tenant="ops")
...          .source("logs", schema={"ts": "int", "level": "str"}, event_time="ts")
...          .filter("level == 'ERROR'").sink("alerts"))         # doctest: +SKIP
{'id': 'errors', 'name': 'errors', 'tenant': 'ops', 'created': True, ...}
>>> c.push("errors", "logs", [{"ts": 1, "level": "ERROR"}])      # doctest: +SKIP
>>> c.status("errors")["latency"]["p99_ms"]                       # doctest: +SKIP

Refusals raise `ServiceError` (status, code, expected, got, fix); an invalid
spec raises the definition layer's own `SpecError`, as a local build would.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx
import msgpack

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import SpecError
from cameo_actors.service.config import DEFAULT_URL, ClientConfig
from cameo_actors.service.errors import ApiError

#: Events per HTTP request when pushing: big enough to amortise a round trip.
PUSH_BATCH = 5_000


#: What the client raises when the service refuses a request (status 0: unreachable).
ServiceError = ApiError


def _df(name: str) -> str:
    """The URL path of a dataflow (names are URL-safe by the spec's rules; quoted anyway)."""
    return "/v1/dataflows/" + quote(name, safe="")


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


def spec_dict(dataflow: Dataflow | DataflowSpec | dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Whatever describes a dataflow -> its spec dict (a JSON text is parsed, not validated:
    the service validates, and says what is wrong)."""
    if isinstance(dataflow, Dataflow):
        return dataflow.spec.to_dict()
    if isinstance(dataflow, DataflowSpec):
        return dataflow.to_dict()
    if isinstance(dataflow, (str, bytes)):
        return json.loads(dataflow)  # type: ignore[no-any-return]
    return dict(dataflow)


class Client:
    """A connection to a cameo service.

    Args:
        url: the service's address (default: CAMEO_URL, the local service, or 127.0.0.1:8470).
        token: the bearer token (default: CAMEO_TOKEN / CAMEO_TOKEN_FILE / the local admin token).
        timeout_s: seconds per request.
        http: an httpx.Client to use instead of a new one (tests pass FastAPI's TestClient).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout_s: float = 30.0, http: httpx.Client | None = None) -> None:
        if url is None or token is None:
            from cameo_actors.service.config import resolve_client_config

            cfg = resolve_client_config({})
            url = url or service_url(cfg)
            token = token or cfg.resolved_token()
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http is not None:
            http.headers.update(headers)
            self.http = http
        else:
            self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        return cls(service_url(config), config.resolved_token() or "", timeout_s=config.timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_connection()

    def close_connection(self) -> None:
        self.http.close()

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, body: Any = None, use_msgpack: bool = False,
                 params: dict[str, Any] | None = None, raw: bool = False) -> Any:
        headers: dict[str, str] = {}
        content: bytes | None = None
        if body is not None:
            if use_msgpack:
                content = msgpack.packb(body, use_bin_type=True)
                headers["Content-Type"] = "application/msgpack"
            else:
                content = json.dumps(body).encode("utf-8")
                headers["Content-Type"] = "application/json"
        try:
            r = self.http.request(method, path, content=content, headers=headers, params=params)
        except httpx.TransportError as e:
            raise ServiceError(0, "unreachable", f"cannot reach the cameo service at {self.url} "
                               f"({type(e).__name__}: {e})",
                               fix="start it with `cameo serve`, or point --url / CAMEO_URL at "
                                   "it") from None
        if r.status_code >= 400:
            raise self._error(r)
        if raw:
            return r.text
        return r.json() if r.content else None

    @staticmethod
    def _error(r: httpx.Response) -> Exception:
        try:
            e = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            return ServiceError(r.status_code, "http_error", r.text[:200] or r.reason_phrase)
        if e.get("code") == "invalid_spec" and e.get("expected") is not None:
            return SpecError(e.get("step"), e["expected"], e.get("got"), e.get("fix") or "")
        return ServiceError(r.status_code, e.get("code", "error"), e.get("message", ""),
                            expected=e.get("expected"), got=e.get("got"), fix=e.get("fix"),
                            step=e.get("step"))

    # -- dataflows ---------------------------------------------------------------------------
    def submit(self, dataflow: Dataflow | DataflowSpec | dict[str, Any] | str | bytes, *,
               replace: bool = False, use_msgpack: bool = False) -> dict[str, Any]:
        """Submit a dataflow; idempotent by name. Returns {"id", "created", "replaced", ...}."""
        return self._request("POST", "/v1/dataflows", body=spec_dict(dataflow),  # type: ignore[no-any-return]
                             use_msgpack=use_msgpack,
                             params={"replace": "true"} if replace else None)

    def list(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/dataflows")["dataflows"]  # type: ignore[no-any-return]

    def status(self, name: str) -> dict[str, Any]:
        return self._request("GET", _df(name))  # type: ignore[no-any-return]

    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]:
        body = {k: v for k, v in (("latency_target_ms", latency_target_ms), ("weight", weight))
                if v is not None}
        return self._request("PATCH", _df(name), body=body)  # type: ignore[no-any-return]

    def cancel(self, name: str) -> dict[str, Any]:
        return self._request("DELETE", _df(name))  # type: ignore[no-any-return]

    def push(self, name: str, source: str, events: Sequence[dict[str, Any]], *,
             batch_size: int = PUSH_BATCH, use_msgpack: bool = True) -> int:
        """Send events to a source, in batches; returns how many were accepted."""
        n = 0
        for i in range(0, len(events), batch_size):
            got = self._request("POST", f"{_df(name)}/sources/{quote(source, safe='')}/events",
                                body=list(events[i:i + batch_size]), use_msgpack=use_msgpack)
            n += int(got["accepted"])
        return n

    def close(self, name: str) -> dict[str, Any]:
        """End every source of the dataflow (windows fire)."""
        return self._request("POST", f"{_df(name)}/close")  # type: ignore[no-any-return]

    # -- service -----------------------------------------------------------------------------
    def whoami(self) -> dict[str, Any]:
        return self._request("GET", "/v1/whoami")  # type: ignore[no-any-return]

    def info(self) -> dict[str, Any]:
        return self._request("GET", "/v1/info")  # type: ignore[no-any-return]

    def executors(self) -> builtins.list[dict[str, Any]]:
        return self._request("GET", "/v1/executors")["executors"]  # type: ignore[no-any-return]

    def metrics(self) -> str:
        return self._request("GET", "/metrics", raw=True)  # type: ignore[no-any-return]

    def create_token(self, tenant: str) -> dict[str, Any]:
        return self._request("POST", "/v1/tokens", body={"tenant": tenant})  # type: ignore[no-any-return]

    def tokens(self) -> builtins.list[dict[str, Any]]:
        return self._request("GET", "/v1/tokens")  # type: ignore[no-any-return]

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/tokens/{quote(token_id, safe='')}")  # type: ignore[no-any-return]
