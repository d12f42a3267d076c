"""A dataflow's outputs read with cursors: pages of results or error-output records,
shared fairly among the logs, committed by their readers (exactly once). Only the
runtime's read and commit calls, never a dataflow's push lock: a reader does not wait for
a pusher, and its commit is what frees a sink held on a full result log."""

from __future__ import annotations

import builtins
import contextlib
import heapq
from collections.abc import Iterator
from typing import Any

from cameo_actors.operators.exceptions import ResultsNotColumnar
from cameo_actors.runtime.boundary import (
    DataflowInfo,
)
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
)
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import (
    ApiError,
    ended,
    not_columnar,
    not_found,
)
from cameo_actors.service.outputs import (
    DEFAULT_PAGE,
    ERRORS,
    MAX_PAGE,
    RESULTS,
    Cursor,
    below_committed,
    committed_rows,
    error_item,
    merge_tables,
    plan_page,
    result_item,
)
from cameo_actors.service.tenancy import Tenancy


class Results(Tenancy):
    """The core's part that reads and commits outputs (`core.ServiceCore`)."""

    # -- outputs: results and the error output, read with cursors ----------------------------
    # Only the runtime's read and commit calls, never a dataflow's push lock: a reader does
    # not wait for a pusher, and its commit is what frees a sink held on a full result log.
    def read_results(self, principal: Principal, name: str, *, sink: str | None = None,
                     cursor: str | None = None, limit: int = DEFAULT_PAGE,
                     columns: bool = False) -> dict[str, Any]:
        """At most `limit` results after `cursor` (none: after the committed rows), shared
        fairly among the sink's instances. Commits nothing.

        Returns {"rows", "cursor", "sink", "pending"}; each row {"event", "ingest_ms",
        "egress_ms"}, in egress order (one instance's rows in their order). With `columns`,
        "rows" is one Arrow table in that order: the results' columns, then `_ingest_ms`
        and `_egress_ms` (406 if the results do not form columns).
        """
        return self._read(principal, name, RESULTS, sink, cursor, limit, columns)

    def read_errors(self, principal: Principal, name: str, *, cursor: str | None = None,
                    limit: int = DEFAULT_PAGE) -> dict[str, Any]:
        """At most `limit` error-output records after `cursor`, over every executor's error
        log. Records the runtime dropped unread (beyond its capacity) are skipped and counted.

        Returns {"rows", "cursor", "pending", "skipped", "dropped"}; each row {"step", "kind",
        "message", "event", "ingest_ms", "egress_ms"}.
        """
        return self._read(principal, name, ERRORS, None, cursor, limit)

    def commit_results(self, principal: Principal, name: str, *, cursor: str,
                       sink: str | None = None) -> dict[str, Any]:
        """Let the runtime forget the results before `cursor` (a sink held on a full log
        resumes). Committing again, or an older cursor, frees nothing and is no error."""
        return self._commit(principal, name, RESULTS, sink, cursor)

    def commit_errors(self, principal: Principal, name: str, *, cursor: str) -> dict[str, Any]:
        """Let the runtime forget the error-output records before `cursor`."""
        return self._commit(principal, name, ERRORS, None, cursor)

    def _read(self, principal: Principal, name: str, output: str, sink: str | None,
              cursor: str | None, limit: int, columns: bool = False) -> dict[str, Any]:
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ApiError(422, "invalid_request", f"limit {limit!r} is out of range",
                           expected=f"1 to {MAX_PAGE} rows", got=limit,
                           fix=f"ask for at most {MAX_PAGE} rows and read on with the cursor")
        info = self._describe_visible(principal, name, outputs=True)
        at = Cursor.decode(cursor, output) if cursor is not None else None
        if output == RESULTS:
            sink = self._pick_sink(info, name, sink, at)
        available, dropped = self._available(name, output, sink)
        deployment = _deployment(info)
        if at is None:
            starts = {log: committed for log, (committed, _) in available.items()}
        else:
            at.check(name, deployment, sink, available)
            starts = dict(at.positions)
        below = below_committed(starts, available)
        skipped = 0
        if below and output == RESULTS:
            raise committed_rows(name, below, cursor or "")
        if below:  # the error output drops its oldest unread records beyond a capacity
            skipped = sum(c - s for s, c in below.values())
            starts.update({log: c for log, (_, c) in below.items()})
        stops = plan_page(starts, {log: end for log, (_, end) in available.items()}, limit)
        positions = dict(starts)
        pages: builtins.list[Any] = []
        with self._reading(name, cursor):
            for log, stop in stops.items():
                if stop <= starts[log]:
                    continue  # nothing new there: no call
                got: Any
                if columns:  # an Arrow table
                    first, got = starts[log], self.rt.read_result_columns(name, log, starts[log],
                                                                          stop)
                    pages.append(got)
                elif output == RESULTS:
                    first, got = starts[log], self.rt.read_results(name, log, starts[log], stop)
                    pages.append([result_item(r) for r in got])
                else:
                    first, got = self.rt.read_errors(name, log, starts[log], stop)
                    skipped += first - starts[log]
                    pages.append([error_item(r) for r in got])
                positions[log] = first + len(got)
            merged = merge_tables(pages) if columns else \
                list(heapq.merge(*pages, key=lambda r: r["egress_ms"]))
        page: dict[str, Any] = {
            "rows": merged,
            "cursor": Cursor(output, name, deployment, sink, positions).encode(),
            "pending": sum(max(0, end - positions[log]) for log, (_, end) in available.items())}
        if output == RESULTS:
            page["sink"] = sink
        else:
            page.update(skipped=skipped, dropped=dropped)
        return page

    def _commit(self, principal: Principal, name: str, output: str, sink: str | None,
                cursor: str) -> dict[str, Any]:
        info = self._describe_visible(principal, name, outputs=True)
        at = Cursor.decode(cursor, output)
        if output == RESULTS:
            sink = self._pick_sink(info, name, sink, at)
        available, _ = self._available(name, output, sink)
        at.check(name, _deployment(info), sink, available)
        freed = 0
        with self._reading(name, cursor):
            for log, offset in sorted(at.positions.items()):
                committed = available[log][0]
                if offset > committed:
                    if output == RESULTS:
                        self.rt.commit_results(name, log, offset)
                    else:
                        self.rt.commit_errors(name, log, offset)
                    freed += offset - committed
        pending = sum(max(0, end - max(at.positions[log], committed))
                      for log, (committed, end) in available.items())
        return {"cursor": cursor, "freed": freed, "pending": pending}

    def _available(self, name: str, output: str, sink: str | None
                   ) -> tuple[dict[str, tuple[int, int]], int]:
        """(log -> (committed, end), records dropped unread) of one output."""
        with self._reading(name):
            if output == RESULTS:
                return dict(self.rt.result_offsets(name, sink)), 0
            logs = self.rt.error_offsets(name)
        return ({log: (c, e) for log, (c, e, _) in logs.items()},
                sum(d for _, _, d in logs.values()))

    @staticmethod
    def _pick_sink(info: DataflowInfo, name: str, sink: str | None, at: Cursor | None) -> str:
        """The sink asked for, else the cursor's, else the only one; 422 / 404 otherwise."""
        sinks = [s["id"] for s in info["spec"]["steps"] if s["op"] == "sink"]
        sink = sink if sink is not None else at.sink if at is not None else None
        if sink is None:
            if len(sinks) == 1:
                return str(sinks[0])
            raise ApiError(422, "sink_required", f"dataflow {name!r} has {len(sinks)} sinks",
                           expected=f"sink= one of {sinks}", got="no sink",
                           fix="name the sink to read (?sink=NAME, `cameo results --sink NAME`)")
        if sink not in sinks:
            raise ApiError(404, "unknown_sink", f"dataflow {name!r} has no sink {sink!r}",
                           expected=f"one of {sinks}", got=sink,
                           fix="read one of the dataflow's sinks")
        return sink

    @contextlib.contextmanager
    def _reading(self, name: str, cursor: str | None = None) -> Iterator[None]:
        """The runtime's answers about a dataflow's outputs, as the API says them."""
        try:
            yield
        except DataflowEnded as e:  # cancelled or failed meanwhile: its outputs were freed
            raise ended(e) from None
        except KeyError:  # cancelled meanwhile (an executor forgot it before the controller)
            raise not_found(name) from None
        except ResultsNotColumnar as e:  # asked for Arrow: read them as JSON or msgpack
            raise not_columnar(e) from None
        except ValueError as e:  # the runtime refuses to read rows another reader committed
            raise ApiError(409, "cursor_committed", f"rows of dataflow {name!r} after this cursor "
                           f"were committed meanwhile by another reader ({e})",
                           expected="one reader per output", got=(cursor or "")[:80],
                           fix="read again without a cursor (from the committed rows)") from None


def _deployment(info: DataflowInfo) -> str:
    """Names one deployment of a dataflow: a redeploy under the same name gets another
    (as the Spark tier's offsets do), so a replaced dataflow's cursors are refused."""
    return repr(info.get("submitted_at"))
