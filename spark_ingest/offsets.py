"""Offset bookkeeping of the `cameo` Spark source. Pure: no Spark, no Ray.

The runtime keeps each output log (one per sink activation, or one error log
per executor) with offsets: rows below the *committed* offset are forgotten,
rows up to the *end* offset are readable. A Spark offset is a JSON dict::

    {"deployment": "<dataflow>@<deploy time>", "logs": {"<log id>": <next offset>, ...}}

Spark writes the end offset of a micro-batch to its offset log before the
batch runs, replays the same range after a failure, and calls `commit(end)`
only after the batch's output is in its commit log. So the reader commits in
the runtime only in `commit`, and a restarted query resumes at its
checkpoint's offsets, which the runtime still holds: nothing lost, nothing
written twice.

>>> avail = {"d/o/0": (0, 5), "d/o/1": (2, 3)}
>>> start = initial_offset("d@1", avail)
>>> start
{'deployment': 'd@1', 'logs': {'d/o/0': 0, 'd/o/1': 2}}
>>> end = latest_offset(start, "d@1", avail, max_rows=4)
>>> end["logs"]
{'d/o/0': 3, 'd/o/1': 3}
>>> ranges(start, end, rows_per_partition=2)
[('d/o/0', 0, 2), ('d/o/0', 2, 3), ('d/o/1', 2, 3)]
>>> to_commit(end, {"d/o/0": (0, 5), "d/o/1": (3, 3)})
{'d/o/0': 3}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_ingest.exceptions import OffsetError

#: log id -> (committed offset, end offset), as the runtime reports them
Available = Mapping[str, tuple[int, int]]
Offset = dict[str, Any]


def make_offset(deployment: str, logs: Mapping[str, int]) -> Offset:
    return {"deployment": deployment, "logs": {k: int(v) for k, v in sorted(logs.items())}}


def parse_offset(offset: Any) -> tuple[str, dict[str, int]]:
    """(deployment, {log: offset}) of a Spark offset dict (or its JSON text)."""
    if isinstance(offset, str):
        import json

        offset = json.loads(offset)
    if not isinstance(offset, dict) or not isinstance(offset.get("logs"), dict) \
            or not isinstance(offset.get("deployment"), str):
        raise OffsetError(f"not a cameo offset: {offset!r}; this checkpoint was written by another "
                          "source; use a new checkpointLocation")
    logs = offset["logs"]
    if not all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in logs.items()):
        raise OffsetError(f"a cameo offset with bad log offsets: {logs!r}")
    return offset["deployment"], dict(logs)


def initial_offset(deployment: str, available: Available) -> Offset:
    """A new query starts at what the runtime still holds (its committed offsets)."""
    return make_offset(deployment, {log: committed for log, (committed, _) in available.items()})


def latest_offset(start: Any, deployment: str, available: Available,
                  max_rows: int | None = None, *, lossy: bool = False) -> Offset:
    """The end offset of the next micro-batch: everything available after `start`,
    or at most `max_rows` rows shared fairly among the logs.

    When the dataflow was redeployed since `start` (same name, new deployment), the
    new deployment's logs are read from their beginning: the query goes on, into the
    same output, with the results of the deployment that runs now (those the old one
    had not handed over were dropped when it was cancelled).

    Raises OffsetError when `start` cannot be resumed from: a log the checkpoint is
    ahead of, or rows committed by another reader. With `lossy` (the error output,
    whose oldest unread rows the runtime drops beyond a capacity, counted), the
    reader skips over dropped rows instead.
    """
    begin = _begin(start, deployment, available)
    if lossy:
        begin = {log: max(offset, available[log][0]) for log, offset in begin.items()}
    for log, offset in begin.items():
        committed, end = available[log]
        if offset > end:
            raise OffsetError(f"the checkpoint is at offset {offset} of {log!r}, the runtime only "
                              f"has {end} rows; use a new checkpointLocation")
        if offset < committed:
            raise OffsetError(f"rows {offset}..{committed} of {log!r} were committed by another "
                              "reader; one Spark query per dataflow output, or they would be "
                              "lost; stop the other query")
    want = {log: available[log][1] - begin[log] for log in begin}
    if max_rows is not None:
        want = _share(want, max_rows)
    return make_offset(deployment, {log: begin[log] + n for log, n in want.items()})


def nothing_new(start: Any, deployment: str, available: Available) -> dict[str, int] | None:
    """Where each log resumes after `start` when none has rows past it (what a reader's
    planning then waits from: `Runtime.await_results`), else None: rows to plan now, or
    another deployment than `start`'s (read from its beginning)."""
    start_dep, logs = parse_offset(start)
    if start_dep != deployment or any(end > logs.get(log, committed)
                                      for log, (committed, end) in available.items()):
        return None
    return logs


def _begin(start: Any, deployment: str, available: Available) -> dict[str, int]:
    """Where each available log resumes after `start`."""
    start_dep, start_logs = parse_offset(start)
    if start_dep != deployment:
        return dict.fromkeys(available, 0)  # a new deployment: its logs from the start
    unknown = sorted(set(start_logs) - set(available))
    if unknown:
        raise OffsetError(f"the checkpoint reads logs {unknown}, which the dataflow does not have "
                          f"(logs: {sorted(available)}); use a new checkpointLocation")
    return {log: start_logs.get(log, committed) for log, (committed, _) in available.items()}


def _share(want: Mapping[str, int], budget: int) -> dict[str, int]:
    """Split `budget` rows among logs: each gets an equal share, unused shares go round."""
    got = dict.fromkeys(want, 0)
    left = budget
    open_logs = [log for log in sorted(want) if want[log] > 0]
    while left > 0 and open_logs:
        share = max(1, left // len(open_logs))
        for log in list(open_logs):
            take = min(share, want[log] - got[log], left)
            got[log] += take
            left -= take
            if got[log] == want[log]:
                open_logs.remove(log)
            if left == 0:
                break
    return got


def ranges(start: Any, end: Any, rows_per_partition: int | None = None) -> list[tuple[str, int, int]]:
    """(log, first, stop) ranges to read between two offsets, split to at most
    `rows_per_partition` rows each; empty ranges are left out. A log `start` does not
    have (or all of them, when `end` is of a newer deployment) is read from offset 0."""
    start_dep, s = parse_offset(start)
    end_dep, e = parse_offset(end)
    if start_dep != end_dep:
        s = {}
    out: list[tuple[str, int, int]] = []
    for log in sorted(e):
        first, stop = s.get(log, 0), e[log]
        if stop < first:
            raise OffsetError(f"end offset {stop} of {log!r} is before its start {first}")
        step = rows_per_partition or max(1, stop - first)
        out.extend((log, i, min(i + step, stop)) for i in range(first, stop, step))
    return out


def to_commit(end: Any, available: Available, deployment: str | None = None) -> dict[str, int]:
    """{log: offset} to commit in the runtime after Spark committed a batch ending at
    `end` (logs the runtime already committed that far, and offsets of another
    deployment than `deployment`, are left out)."""
    end_dep, logs = parse_offset(end)
    if deployment is not None and end_dep != deployment:
        return {}
    return {log: off for log, off in logs.items() if log in available and off > available[log][0]}
