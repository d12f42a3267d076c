"""A handle's outputs: each dataflow's results and error output read from the executors
hosting its sinks (with offsets, committed by their readers: exactly once), its
statistics merged over its executors, and the Spark tier's input positions.
"""

from __future__ import annotations

import builtins
from typing import Any

import pyarrow as pa

from cameo_actors.errors import CameoError
from cameo_actors.operators.base import ErrorRecord, Event
from cameo_actors.operators.column_results import concat_results
from cameo_actors.runtime._private.client.dataflows import Dataflows
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor, answered, gather
from cameo_actors.runtime._private.stats import dataflow_stats
from cameo_actors.runtime.boundary import (
    CALL_TIMEOUT_S,
    ActivationId,
    DataflowInfo,
    DataflowStats,
    ErrorLogOffsets,
    LogOffsets,
    ResultRow,
    error_log_id,
)


class Outputs:
    """What a `Runtime` handle reads: results (from where it last read, or the committed
    offsets), the error output, statistics, and input positions."""

    _dataflows: Dataflows
    #: (dataflow, sink activation) -> the offset this handle reads from next
    _offsets: dict[tuple[str, str], int]
    #: dataflow -> its recoveries when last read (after one, at-least-once results are
    #: read again from the committed offsets)
    _recoveries: dict[str, int]
    #: dataflow -> the deployment last read (one deployed again is read from its start)
    _deployments: dict[str, str]

    def _hosts(self, info: DataflowInfo, aids: set[str]) -> list[Actor[ExecutorAPI]]:
        return [self._dataflows.executor(h) for h in sorted({info["hosts"][a] for a in aids})]

    # -- results read by this handle ---------------------------------------------------------
    def result_rows(self, name: str, sink: str | None = None, *, commit: bool = True
                    ) -> builtins.list[ResultRow]:
        """New results since the last read: (event, ingest_ms, egress_ms) rows.
        With commit, the runtime forgets them (and a sink held on a full log resumes)."""
        return [row for part in self._read_new(name, sink, commit, columns=False)
                for row in part]

    def result_table(self, name: str, sink: str | None = None, *, commit: bool = True
                     ) -> pa.Table:
        """The new results of `result_rows` as one Arrow table (a sink fed columns kept
        them: no object per row on the way): the results' columns, then `_ingest_ms` and
        `_egress_ms`, each sink instance's in their order. `ResultsNotColumnar` if they do
        not form columns."""
        return concat_results(self._read_new(name, sink, commit, columns=True))

    def results(self, name: str, sink: str | None = None) -> builtins.list[Event]:
        """New results since the last read (and committed)."""
        return [e for e, _, _ in self.result_rows(name, sink)]

    def _read_new(self, name: str, sink: str | None, commit: bool, columns: bool
                  ) -> builtins.list[Any]:
        """Each sink activation's new results (rows, or a table with `columns`)."""
        spec = self._dataflows.spec(name)
        sinks = [s for s in spec.sinks if sink is None or s.id == sink]
        info = self._dataflows.live(name)
        if self._deployments.setdefault(name, info["deployment"]) != info["deployment"]:
            self._deployments[name] = info["deployment"]  # deployed again: from its start
            self._recoveries.pop(name, None)
            for key in [k for k in self._offsets if k[0] == name]:
                del self._offsets[key]
        if self._recoveries.setdefault(name, info["recoveries"]) != info["recoveries"]:
            self._recoveries[name] = info["recoveries"]
            if (spec.fault_tolerance.delivery or self._dataflows.config.delivery) \
                    == "at_least_once":
                # Restored: the rows after its checkpoint are made again, maybe in another
                # order; read again from the last commit (rows come again with their ids).
                for key in [k for k in self._offsets if k[0] == name]:
                    del self._offsets[key]
        return [self._read_sink(name, aid, commit, columns) for s in sinks
                for aid in map(str, ActivationId.of_step(name, s.id, s.parallelism))]

    def _read_sink(self, name: str, aid: str, commit: bool, columns: bool) -> Any:
        """One sink activation's new results, from this handle's offset (or the committed
        one): rows, or a table with `columns`."""
        flows = self._dataflows
        start = self._offsets.get((name, aid))
        if start is None:
            start = flows.ask(name, lambda i: flows.at(i, aid).send(
                ExecutorAPI.result_offsets, name).get())[aid][0]
        at = start
        got: Any = flows.ask(name, lambda i: (
            flows.at(i, aid).send(ExecutorAPI.read_result_columns, name, aid, at, None) if columns
            else flows.at(i, aid).send(ExecutorAPI.read_results, name, aid, at, None)).get())
        end = start + len(got)
        self._offsets[(name, aid)] = end
        if commit:
            flows.ask(name, lambda i: flows.at(i, aid).send(
                ExecutorAPI.commit_results, name, aid, end).get())
        return got if columns else [(e, ing, eg) for e, ing, eg in got]

    # -- outputs with offsets, read exactly once (the service, the Spark tier) ----------------
    def _sink_activations(self, name: str, sink: str | None) -> set[str]:
        """The activations of `name`'s sink `sink` (None: of every sink)."""
        sinks = [s for s in self._dataflows.spec(name).sinks if sink is None or s.id == sink]
        return {str(a) for s in sinks for a in ActivationId.of_step(name, s.id, s.parallelism)}

    def result_offsets(self, name: str, sink: str | None = None) -> dict[str, LogOffsets]:
        """sink activation -> (committed offset, end offset) of each sink's result log."""
        wanted = self._sink_activations(name, sink)
        parts = self._dataflows.ask(name, lambda i: gather(
            [e.send(ExecutorAPI.result_offsets, name) for e in self._hosts(i, wanted)]))
        return {a: (int(c), int(e)) for part in parts for a, (c, e) in part.items() if a in wanted}

    def await_results(self, name: str, sink: str | None = None,
                      after: dict[str, int] | None = None, timeout_s: float = 1.0
                      ) -> dict[str, LogOffsets]:
        """`result_offsets` once a sink log has readable rows past `after` (sink
        activation -> the reader's next offset; None: the committed offsets), or after
        `timeout_s` (at most 5 s): a reader that waits here is told of results as their
        checkpoint commits, without asking again and again."""
        wanted = self._sink_activations(name, sink)
        mine = {a: int(o) for a, o in (after or {}).items() if a in wanted}

        def wait(info: DataflowInfo) -> builtins.list[dict[str, LogOffsets]]:
            replies = [e.send(ExecutorAPI.await_results, name, mine, timeout_s)
                       for e in self._hosts(info, wanted)]
            if len(replies) == 1:
                return [replies[0].get(timeout_s + CALL_TIMEOUT_S)]
            answered(replies, 1, timeout_s + CALL_TIMEOUT_S)
            # Every executor's logs as they are now; the other waits end on their own.
            return gather([e.send(ExecutorAPI.result_offsets, name)
                           for e in self._hosts(info, wanted)])

        parts = self._dataflows.ask(name, wait)
        return {a: (int(c), int(e)) for part in parts for a, (c, e) in part.items() if a in wanted}

    def read_results(self, name: str, sink_activation: str, start: int, end: int | None = None
                     ) -> builtins.list[ResultRow]:
        """Rows [start, end) of one sink activation's result log, without committing."""
        flows = self._dataflows
        return list(flows.ask(name, lambda i: flows.at(i, sink_activation).send(
            ExecutorAPI.read_results, name, sink_activation, start, end).get()))

    def read_result_columns(self, name: str, sink_activation: str, start: int,
                            end: int | None = None) -> pa.Table:
        """The rows of `read_results` as one Arrow table: the results' columns, then
        `_ingest_ms` and `_egress_ms` (`ResultsNotColumnar` if they do not form columns)."""
        flows = self._dataflows
        table: pa.Table = flows.ask(name, lambda i: flows.at(i, sink_activation).send(
            ExecutorAPI.read_result_columns, name, sink_activation, start, end).get())
        return table

    def commit_results(self, name: str, sink_activation: str, offset: int) -> None:
        """Let the runtime forget rows below `offset` (a reader persisted them)."""
        flows = self._dataflows
        flows.ask(name, lambda i: flows.at(i, sink_activation).send(
            ExecutorAPI.commit_results, name, sink_activation, offset).get())

    def error_offsets(self, name: str) -> dict[str, ErrorLogOffsets]:
        """Error log id (`error_log_id`, one per executor the dataflow runs on) ->
        (committed, end, dropped unread) of the error output."""
        flows = self._dataflows
        info, parts = flows.call(name, lambda i: gather(
            [flows.executor(h).send(ExecutorAPI.error_offsets, name) for h in i["executors"]]))
        return {error_log_id(name, h): (int(c), int(e), int(d))
                for h, (c, e, d) in zip(info["executors"], parts, strict=True)}

    def read_errors(self, name: str, log: str, start: int, end: int | None = None
                    ) -> tuple[int, builtins.list[ResultRow]]:
        """(offset of the first row, rows) of one error log (a key of error_offsets);
        each row is (ErrorRecord dict, ingest_ms, egress_ms)."""
        first, rows = self._dataflows.ask(name, lambda i: self._error_log_host(name, log).send(
            ExecutorAPI.read_errors, name, start, end).get())
        return int(first), list(rows)

    def commit_errors(self, name: str, log: str, offset: int) -> None:
        self._dataflows.ask(name, lambda i: self._error_log_host(name, log).send(
            ExecutorAPI.commit_errors, name, offset).get())

    def _error_log_host(self, name: str, log: str) -> Actor[ExecutorAPI]:
        executors = self._dataflows.live(name)["executors"]
        for h in executors:
            if error_log_id(name, h) == log:
                return self._dataflows.executor(h)
        raise CameoError(f"dataflow {name!r} has no error log {log!r}; its logs: "
                         f"{[error_log_id(name, h) for h in executors]}")

    # -- input positions (the Spark tier) ----------------------------------------------------
    def mark_input_batch(self, name: str, source: str, batch_id: int, query: str = "") -> None:
        """Hand a Spark input batch id to the runtime: every event of it was pushed (and
        flushed) before this call; recorded on each executor hosting the source."""
        sources = set(self._dataflows.source_instances(name, source))
        self._dataflows.ask(name, lambda i: gather([e.send(
            ExecutorAPI.mark_input_batch, name, f"{source}@{query}", int(batch_id))
            for e in self._hosts(i, sources)]))

    def input_batches(self, name: str) -> dict[str, int]:
        """"<source>@<query>" -> the last input batch id marked (see mark_input_batch)."""
        flows = self._dataflows
        parts = flows.ask(name, lambda i: gather(
            [flows.executor(h).send(ExecutorAPI.input_batches, name) for h in i["executors"]]))
        merged: dict[str, int] = {}
        for part in parts:
            for key, batch in part.items():
                merged[key] = max(batch, merged.get(key, batch))
        return merged

    # -- statistics and the error output -----------------------------------------------------
    def stats(self, name: str) -> DataflowStats:
        """Latency percentiles, share within target, throughput counters, backlog, the
        executor time its operators took (busy_ms), errors. For an ended dataflow whose
        parts were freed, DataflowEnded (its last statistics are in describe()["final"])."""
        flows = self._dataflows
        return dataflow_stats(*flows.call(name, lambda i: gather(
            [flows.executor(h).send(ExecutorAPI.dataflow_stats, name) for h in i["executors"]])))

    def errors(self, name: str, limit: int = 100) -> builtins.list[ErrorRecord]:
        """Recent records of the dataflow's error output (counts are in stats())."""
        flows = self._dataflows
        parts = flows.ask(name, lambda i: gather(
            [flows.executor(h).send(ExecutorAPI.error_records, name, limit)
             for h in i["executors"]]))
        return [ErrorRecord(**r) for part in parts for r in part][-limit:]

