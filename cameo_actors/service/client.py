"""The Python client of the cameo service (what the CLI uses).

>>> from cameo_actors import Dataflow
>>> from cameo_actors.service.client import Client
>>> c = Client("http://127.0.0.1:8470", token="...")              # doctest: +SKIP
>>> c.submit(Dataflow("errors", latency_target_ms=50, tenant="ops")
...          .source("logs", schema={"ts": "int", "level": "str"}, event_time="ts")
...          .filter("level == 'ERROR'").sink("alerts"))         # doctest: +SKIP
{'id': 'errors', 'name': 'errors', 'tenant': 'ops', 'created': True, ...}
>>> c.push("errors", "logs", [{"ts": 1, "level": "ERROR"}])      # doctest: +SKIP
Pushed(accepted=1, rejected=0, rejections=[])
>>> c.status("errors")["latency"]["p99_ms"]                       # doctest: +SKIP

Refusals raise `ServiceError` (status, code, expected, got, fix); an invalid
spec raises the definition layer's own `SpecError`, as a local build would.

Each method sends one operation of the table (`operations.OPERATIONS`) through
`Client.call` and returns its answer checked to be of the shape it says: the
runtime's records (`runtime.boundary`) where the answer is one, else a JSON object.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import pyarrow as pa

from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.column_ipc import ARROW_STREAM
from cameo_actors.runtime.boundary import (
    Cancelled,
    DataflowSummary,
    ExecutorRemoval,
    ExecutorStats,
    MigrationInfo,
    NodeDrained,
    Updated,
)
from cameo_actors.service import paging
from cameo_actors.service.config import ClientConfig
from cameo_actors.service.operations import OPERATION, PUSH_BATCH, Operation
from cameo_actors.service.outputs import DEFAULT_PAGE
from cameo_actors.service.paging import ENDED_STATES
from cameo_actors.service.transport import (
    MSGPACK_ACCEPT,
    ServiceError,
    Transport,
    as_list,
    as_object,
    as_objects,
    as_record,
    as_records,
    as_text,
    service_url,
    unwrap,
)

__all__ = ["ENDED_STATES", "MSGPACK_ACCEPT", "PUSH_BATCH", "REJECTIONS_SHOWN", "Client",
           "Pushed", "ServiceError", "service_url", "spec_dict"]

#: Refused events a push's answer describes (it counts them all).
REJECTIONS_SHOWN = 10


class Pushed(int):
    """What `Client.push` returns: the events accepted, as an int (so `n == 1000` and
    `total += n` go on working), with the events refused.

    Attributes:
        rejected: events the service refused, each alone (they are in the error output).
        rejections: the first few of them: {"index" in the pushed events, "field", "reason"}.
    """

    rejected: int
    rejections: list[dict[str, Any]]

    def __new__(cls, accepted: int, rejected: int = 0,
                rejections: list[dict[str, Any]] | None = None) -> Pushed:
        self = super().__new__(cls, accepted)
        self.rejected = rejected
        self.rejections = rejections or []
        return self

    @property
    def accepted(self) -> int:
        return int(self)

    def __getitem__(self, key: str) -> Any:
        """The push answer's fields by name, as in the HTTP answer: p["rejected"]."""
        if key not in ("accepted", "rejected", "rejections"):
            raise KeyError(key)
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"Pushed(accepted={int(self)}, rejected={self.rejected}, "
                f"rejections={self.rejections!r})")

    def __str__(self) -> str:  # the number, as an int prints
        return str(int(self))


def spec_dict(dataflow: Dataflow | DataflowSpec | dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Whatever describes a dataflow -> its spec dict (a JSON text is parsed, not validated:
    the service validates, and says what is wrong)."""
    if isinstance(dataflow, Dataflow):
        return dataflow.spec.to_dict()
    if isinstance(dataflow, DataflowSpec):
        return dataflow.to_dict()
    if isinstance(dataflow, (str, bytes)):
        return as_object(json.loads(dataflow), "the spec")
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
        self.transport = Transport(url, token, timeout_s=timeout_s, http=http)
        self.url = self.transport.url
        self.http = self.transport.http

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        return cls(service_url(config), config.resolved_token() or "", timeout_s=config.timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_connection()

    def close_connection(self) -> None:
        self.transport.close()

    def call(self, operation: str | Operation, *, body: Any = None,
             params: dict[str, Any] | None = None, use_msgpack: bool = False,
             accept: str | None = None, **path: Any) -> Any:
        """Send one operation of the service (`operations.OPERATIONS`, by name) and return
        its answer as it came (JSON data, or text): the methods below are this with their
        arguments, and their answers checked; an operation without a method of its own is
        called the same way.

        >>> client.call("status", name="alerts")["state"]          # doctest: +SKIP
        'running'
        """
        op = operation if isinstance(operation, Operation) else OPERATION.get(operation)
        if op is None:
            raise ValueError(f"Client.call: expected an operation of the service, one of "
                             f"{sorted(OPERATION)}, got {operation!r}")
        return self.transport.send(op, body=body, params=params, use_msgpack=use_msgpack,
                                   accept=accept, path=path)

    def _object(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """An operation whose answer is an object."""
        return as_object(self.call(operation, **kwargs), operation)

    def _result(self, operation: str, **kwargs: Any) -> object:
        """An operation's result: its answer, unwrapped when the row wraps it ({"added": ..})."""
        wrap = OPERATION[operation].wrap
        answer = self.call(operation, **kwargs)
        return unwrap(answer, wrap, operation) if wrap else answer

    # -- dataflows ---------------------------------------------------------------------------
    def submit(self, dataflow: Dataflow | DataflowSpec | dict[str, Any] | str | bytes, *,
               replace: bool = False, use_msgpack: bool = False) -> dict[str, Any]:
        """Submit a dataflow; idempotent by name. Returns {"id", "created", "replaced", ...}."""
        return self._object("submit", body=spec_dict(dataflow), use_msgpack=use_msgpack,
                            params={"replace": "true"} if replace else None)

    def check(self, dataflow: Dataflow | DataflowSpec | dict[str, Any] | str | bytes
              ) -> dict[str, Any]:
        """Admission control's prediction for a dataflow, without starting it: whether it
        and every running dataflow would meet their targets, and what would be needed."""
        return self._object("check", body=spec_dict(dataflow))

    def overload(self) -> dict[str, Any]:
        """Who misses or will miss its target now, by how much, and whose load causes it."""
        return self._object("overload")

    def explain(self, name: str | None = None, last_s: float = 60.0) -> dict[str, Any]:
        """Why a dataflow (None: the pool) missed or met its target over the last `last_s`
        seconds: its critical path ranked, its operators' shares, latency per second, and
        `words` (the headline, then one line per part of the path). A tenant token sees
        other tenants' dataflows as "another tenant".

        >>> Client("http://127.0.0.1:8470", "t").explain("alerts")["words"][0]  # doctest: +SKIP
        'alerts: 97% within its 50 ms target; ...'
        """
        params = {"last": f"{last_s!r}"}
        if name is None:
            return self._object("explain_pool", params=params)
        return self._object("explain", params=params, name=name)

    def list(self, states: Sequence[str] | None = None, *, detail: bool = False
             ) -> builtins.list[DataflowSummary]:
        """The dataflows this token may see, live and ended (or only those in `states`);
        with `detail`, each live one's figures (p99, share within target, rates, backlog)."""
        params: dict[str, Any] = {"state": builtins.list(states)} if states else {}
        if detail:
            params["detail"] = "true"
        return as_records(self._result("list_dataflows", params=params or None), DataflowSummary,
                          "list_dataflows")

    def exceptions(self, name: str) -> dict[str, Any]:
        """Why a dataflow failed, and its last operator failures."""
        return self._object("exceptions", name=name)

    def status(self, name: str) -> dict[str, Any]:
        return self._object("status", name=name)

    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> Updated:
        body = {k: v for k, v in (("latency_target_ms", latency_target_ms), ("weight", weight))
                if v is not None}
        return as_record(self.call("update", body=body, name=name), Updated, "update")

    def cancel(self, name: str) -> Cancelled:
        return as_record(self.call("cancel", name=name), Cancelled, "cancel")

    def push(self, name: str, source: str,
             events: Sequence[dict[str, Any]] | pa.Table | pa.RecordBatch, *,
             batch_size: int = PUSH_BATCH, use_msgpack: bool = True) -> Pushed:
        """Send events to a source, in batches; returns how many were accepted (an int),
        with `rejected` and `rejections`.

        The service refuses an event it cannot carry (an integer beyond 64 bits, nesting
        too deep) alone and writes it to the error output; `rejections` describes the
        first 10 ({"index" in `events`, "field", "reason"}). A value this client cannot
        encode at all (a Decimal, a datetime) raises before its batch is sent, as msgpack
        or json does.

        Columns (a `pyarrow.Table` or `RecordBatch`) go as Arrow IPC streams of
        `batch_size` rows; a column off the source's schema refuses its batch whole
        (`ServiceError` 422 "invalid_columns", naming the column).
        """
        if isinstance(events, (pa.Table, pa.RecordBatch)):
            n = 0
            for i in range(0, events.num_rows, batch_size):
                n += int(self._object("push", body=events.slice(i, batch_size), name=name,
                                      source=source)["accepted"])
            return Pushed(n, 0, [])
        accepted = rejected = 0
        shown: builtins.list[dict[str, Any]] = []
        for i in range(0, len(events), batch_size):
            got = self._object("push", body=builtins.list(events[i:i + batch_size]),
                               use_msgpack=use_msgpack, name=name, source=source)
            accepted += int(got["accepted"])
            rejected += int(got.get("rejected", 0))
            # The service counts indexes in its request: count them in `events`.
            refused = as_objects(got.get("rejections", []), "push")
            shown += [{**r, "index": i + int(r["index"])}
                      for r in refused[:max(0, REJECTIONS_SHOWN - len(shown))]]
        return Pushed(accepted, rejected, shown)

    def close(self, name: str) -> dict[str, Any]:
        """End every source of the dataflow (windows fire)."""
        return self._object("close", name=name)

    # -- outputs: results and the error output, one HTTP round trip per page ------------------
    def results(self, name: str, sink: str | None = None, cursor: str | None = None,
                limit: int = DEFAULT_PAGE, *, columns: bool = False) -> dict[str, Any]:
        """A page of at most `limit` results after `cursor` (None: after the committed rows).
        Reading commits nothing: pass the answer's cursor back to read on, and to
        `commit_results` once the rows are kept.

        Returns {"rows": [{"event", "ingest_ms", "egress_ms"}, ...], "cursor", "sink",
        "pending"} (pending: rows after the cursor when the page was read). With `columns`,
        "rows" is a `pyarrow.Table` read as an Arrow stream: the results' columns, then
        `_ingest_ms` and `_egress_ms` (a ServiceError 406 if they do not form columns).
        """
        params = {k: v for k, v in (("sink", sink), ("cursor", cursor), ("limit", limit))
                  if v is not None}
        return self._object("results", params=params, name=name,
                            accept=ARROW_STREAM if columns else MSGPACK_ACCEPT)

    def commit_results(self, name: str, cursor: str, sink: str | None = None) -> dict[str, Any]:
        """Let the service forget the results before `cursor` (a sink held on a full log
        resumes). Returns {"cursor", "freed", "pending"}."""
        body = {"cursor": cursor} if sink is None else {"cursor": cursor, "sink": sink}
        return self._object("commit_results", body=body, name=name)

    def errors(self, name: str, cursor: str | None = None, limit: int = DEFAULT_PAGE
               ) -> dict[str, Any]:
        """A page of the dataflow's error output after `cursor`, like `results`. Returns
        {"rows": [{"step", "kind", "message", "event", "ingest_ms", "egress_ms"}, ...],
        "cursor", "pending", "skipped", "dropped"} (skipped: records before this page the
        service dropped unread; dropped: all it dropped so far)."""
        params = {k: v for k, v in (("cursor", cursor), ("limit", limit)) if v is not None}
        return self._object("errors", params=params, accept=MSGPACK_ACCEPT, name=name)

    def commit_errors(self, name: str, cursor: str) -> dict[str, Any]:
        """Let the service forget the error-output records before `cursor`."""
        return self._object("commit_errors", body={"cursor": cursor}, name=name)

    def follow(self, name: str, sink: str | None = None, *, errors: bool = False,
               cursor: str | None = None, limit: int = DEFAULT_PAGE, poll_s: float = 0.5,
               commit: bool = True, max_rows: int | None = None, until_ended: bool = False,
               until_caught_up: bool = False, stop: threading.Event | None = None
               ) -> Iterator[dict[str, Any]]:
        """Rows of a sink (or of the error output) as they come, page by page.

        A page is committed once its last row was yielded and the next one asked for, so
        rows a consumer stopped in the middle of are read again by the next reader (at
        least once). A full page is followed by the next at once; an empty one by a wait of
        `poll_s` (cut short by `stop`). Page by page, with the commits the caller's:
        `paging.pages`.

        Args:
            errors: follow the error output instead of a sink's results.
            cursor: where to start (None: after the committed rows).
            limit: rows per page (one HTTP round trip each).
            commit: commit each page after it was yielded.
            max_rows: stop after this many rows (the last page asks for no more).
            until_ended: stop once the dataflow ended (finished, cancelled, failed, gone)
                and every row was read.
            until_caught_up: stop once nothing is pending (what is there now, then stop).
            stop: set it (from another thread) to stop after the current page.

        >>> for row in client.follow("alerts", until_ended=True):   # doctest: +SKIP
        ...     print(row["event"])
        """
        for page in paging.pages(self, name, sink, errors=errors, cursor=cursor, limit=limit,
                          poll_s=poll_s, max_rows=max_rows, until_ended=until_ended,
                          until_caught_up=until_caught_up, stop=stop):
            yield from page.rows
            if commit and page.rows:
                paging.commit(self, name, page)

    # -- live reconfiguration: asynchronous; each returns the migration(s) started -----------
    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None) -> MigrationInfo:
        """Change the parallelism of a keyed step (a window or join after key_by) while it
        runs. Returns the migration, running: `wait_migration(m["id"])` waits for its end."""
        body: dict[str, Any] = {"step": step, "parallelism": parallelism, "strategy": strategy}
        if batch_bins is not None:
            body["batch_bins"] = batch_bins
        return as_record(self.call("scale", body=body, name=name), MigrationInfo, "scale")

    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None) -> MigrationInfo:
        """Move key `bins` of a keyed step to instance `to_instance`, or its instance
        `instance` to executor `to_executor`. Returns the migration, running."""
        body: dict[str, Any] = {"step": step, "strategy": strategy}
        for key, value in (("bins", None if bins is None else builtins.list(bins)),
                           ("to_instance", to_instance), ("instance", instance),
                           ("to_executor", to_executor), ("batch_bins", batch_bins)):
            if value is not None:
                body[key] = value
        return as_record(self.call("migrate", body=body, name=name), MigrationInfo, "migrate")

    def migrations(self, name: str | None = None) -> builtins.list[MigrationInfo]:
        """Reconfigurations, running and recent: of one dataflow, or of all you may see."""
        if name is None:
            return as_records(self._result("all_migrations"), MigrationInfo, "all_migrations")
        return as_records(self._result("dataflow_migrations", name=name), MigrationInfo,
                          "dataflow_migrations")

    def wait_migration(self, migration_id: str, timeout_s: float = 120.0, poll_s: float = 0.2,
                       *, sleep: Callable[[float], None] | None = None,
                       clock: Callable[[], float] | None = None) -> MigrationInfo:
        """Poll until the migration is no longer running; returns it (state "done" or
        "failed", with its error). Raises TimeoutError naming it after `timeout_s`, and
        ServiceError (not_found) when no visible migration has that id. `sleep` and `clock`
        default to time.sleep and time.monotonic."""
        clock = clock or time.monotonic
        deadline = clock() + timeout_s
        while True:
            found = [m for m in self.migrations() if m["id"] == migration_id]
            if not found:
                raise ServiceError(404, "not_found", f"no migration {migration_id!r} is visible "
                                   "to this token", expected="the id of a running or recent "
                                   "migration", got=migration_id,
                                   fix="list them with `cameo migrations`")
            m = found[-1]
            if m["state"] != "running":
                return m
            if clock() >= deadline:
                raise TimeoutError(f"migration {migration_id!r} of dataflow {m['dataflow']!r} "
                                   f"step {m['step']!r} still running after {timeout_s:g} s "
                                   f"({m.get('bins_moved', 0)} of {m.get('bins_total', 0)} bins "
                                   "moved); `cameo migrations` shows its progress")
            (sleep or time.sleep)(poll_s)

    def rebalance(self, strategy: str = "batched") -> builtins.list[MigrationInfo]:
        """Even out the executors' load (admin). Returns the migrations started."""
        return as_records(self._result("rebalance", body={"strategy": strategy}), MigrationInfo,
                          "rebalance")

    def add_executors(self, count: int = 1) -> builtins.list[int]:
        """Start `count` executors (admin). Returns their indices."""
        return [int(i) for i in as_list(self._result("add_executors", body={"count": count}),
                                        "add_executors")]

    def remove_executor(self, index: int, *, strategy: str = "batched") -> ExecutorRemoval:
        """Drain executor `index` (admin): its instances move elsewhere, then it stops.
        Returns {"executor", "moving": [instances], "state": "draining"}."""
        params = None if strategy == "batched" else {"strategy": strategy}
        return as_record(self.call("remove_executor", params=params, index=int(index)),
                         ExecutorRemoval, "remove_executor")

    def drain_node(self, node: str) -> NodeDrained:
        """Take the executors on `node` (an address or Ray node id) out of the pool before
        the node goes (admin): its dataflows are checkpointed and restored on the
        executors left; Ray places nothing new there. Returns {"node", "executors", "dataflows",
        "ray_refused", "seconds"}."""
        return as_record(self.call("drain_node", node=node), NodeDrained, "drain_node")

    # -- self-scaling ------------------------------------------------------------------------
    def scaling(self, name: str | None = None) -> dict[str, Any]:
        """The scaling controller's view: of dataflow `name`, or pool-wide (a tenant token
        sees its own dataflows). Per dataflow each step's `parallelism`, `lessees`,
        `true_processing_eps` and `busy`; the last `decisions` with their `reason`;
        `misses` (the pool cannot meet the target even at its maximum); failed actions
        (`errors`).

        >>> c.scaling("alerts")["dataflows"]["alerts"]["steps"]["win"]["parallelism"]  # doctest: +SKIP
        4
        """
        if name is None:
            return self._object("scaling_status")
        return self._object("dataflow_scaling", name=name)

    def set_scaling(self, name: str, settings: dict[str, Any] | None = None,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        """Give dataflow `name` its own scaling settings, over the pool's (`policy`: off,
        ds2 or threshold; `min_parallelism`, `max_parallelism`, `warmup_s`,
        `scale_down_window_s`, `target_utilization`, `catch_up_s`, `high`, `low`,
        `lessees`, `max_lessees`); they replace its earlier own settings, and None means
        the pool's. `pin` maps steps to the parallelism the policy keeps them at (None
        unpins; steps not named keep their pins). Returns the dataflow's scaling status.
        A setting the runtime refuses raises ServiceError 422 `invalid_scaling`.

        >>> c.set_scaling("alerts", {"policy": "ds2", "max_parallelism": 8},
        ...               pin={"win": None})                          # doctest: +SKIP
        """
        body = {"settings": None if settings is None else dict(settings),
                "pin": dict(pin or {})}
        return self._object("set_scaling", body=body, name=name)

    # -- service -----------------------------------------------------------------------------
    def whoami(self) -> dict[str, Any]:
        return self._object("whoami")

    def info(self) -> dict[str, Any]:
        return self._object("get_info")

    def executors(self) -> builtins.list[ExecutorStats]:
        return as_records(self._result("executors"), ExecutorStats, "executors")

    def metrics(self) -> str:
        return as_text(self.call("metrics"), "metrics")

    def create_token(self, tenant: str) -> dict[str, Any]:
        return self._object("create_token", body={"tenant": tenant})

    def tokens(self) -> builtins.list[dict[str, Any]]:
        return as_objects(self.call("list_tokens"), "list_tokens")

    def revoke_token(self, token_id: str) -> dict[str, Any]:
        return self._object("revoke_token", token_id=token_id)

