"""Reading a dataflow's outputs over the API: cursors and pages. Pure: no HTTP, no Ray.

The runtime keeps each output log with offsets (one result log per sink
instance, one error log per executor): rows below the *committed* offset are
forgotten, rows up to the *end* offset are readable. A client reads a page
after a cursor and commits the cursor once it has kept the rows; reading alone
changes nothing, so a reader that crashes reads the same rows again.

A cursor is opaque to clients: urlsafe base64 (unpadded) of a compact JSON
object naming the output, the dataflow, its deployment (a replaced dataflow's
old cursors are refused) and the sink, and the next offset of each log.

>>> c = Cursor(RESULTS, "alerts", "1.5", "out", {"alerts/out/0": 3})
>>> Cursor.decode(c.encode(), RESULTS) == c
True
>>> plan_page({"a": 0, "b": 10}, {"a": 2, "b": 100}, limit=10)
{'a': 2, 'b': 18}
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.operators.column_results import concat_results
from cameo_actors.runtime.boundary import ResultRow
from cameo_actors.service.errors import ApiError

RESULTS, ERRORS = "results", "errors"
#: Rows per page when the client does not say, and the most one page may hold.
DEFAULT_PAGE, MAX_PAGE = 1_000, 10_000
#: Longest cursor accepted (a cursor holds one offset per sink instance or executor).
MAX_CURSOR_CHARS = 8_192

_KIND = {RESULTS: "r", ERRORS: "e"}
_FIX = "pass the cursor of the last answer unchanged, or none to start at the committed rows"


def bad_cursor(why: str, got: Any) -> ApiError:
    return ApiError(400, "bad_cursor", f"the cursor is not one this service made: {why}",
                    expected="a cursor from a results or errors answer", got=got, fix=_FIX)


def foreign_cursor(why: str, got: Any) -> ApiError:
    return ApiError(422, "foreign_cursor", f"the cursor belongs elsewhere: {why}",
                    expected="a cursor of this dataflow's output", got=got, fix=_FIX)


@dataclass(frozen=True)
class Cursor:
    """Where a reader is in one output of one deployment of a dataflow.

    Attributes:
        output: RESULTS or ERRORS.
        dataflow: the dataflow's name.
        deployment: its deployment (a redeploy under the same name gets another).
        sink: the sink read (None for the error output).
        positions: log id -> the offset of the next row to read.
    """

    output: str
    dataflow: str
    deployment: str
    sink: str | None
    positions: dict[str, int]

    def encode(self) -> str:
        data = {"o": _KIND[self.output], "f": self.dataflow, "d": self.deployment,
                "s": self.sink, "p": self.positions}
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str, output: str) -> Cursor:
        """The cursor in `text`, which must be of `output`; 400 / 422 otherwise."""
        shown = text if len(text) <= 80 else text[:77] + "..."
        if len(text) > MAX_CURSOR_CHARS:
            raise bad_cursor(f"longer than {MAX_CURSOR_CHARS} characters", shown)
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            data = json.loads(raw)
        except (binascii.Error, ValueError):
            raise bad_cursor("not urlsafe base64 of JSON", shown) from None
        if not isinstance(data, dict) or set(data) != {"o", "f", "d", "s", "p"} \
                or data["o"] not in _KIND.values() or not isinstance(data["f"], str) \
                or not isinstance(data["d"], str) or not isinstance(data["p"], dict) \
                or not (data["s"] is None or isinstance(data["s"], str)) \
                or not all(isinstance(k, str) and type(v) is int and v >= 0
                           for k, v in data["p"].items()):
            raise bad_cursor("its fields are not those of a cursor", shown)
        kind = next(k for k, v in _KIND.items() if v == data["o"])
        if kind != output:
            raise foreign_cursor(f"a cursor of the {kind}, not of the {output}", shown)
        return cls(kind, data["f"], data["d"], data["s"], dict(data["p"]))

    def check(self, dataflow: str, deployment: str, sink: str | None,
              available: Mapping[str, tuple[int, int]]) -> None:
        """Refuse a cursor of another dataflow, deployment or sink, or one ahead of a log.
        `available`: log id -> (committed offset, end offset), as the runtime reports."""
        shown = self.encode()[:80]
        if self.dataflow != dataflow:
            raise foreign_cursor(f"a cursor of dataflow {self.dataflow!r}, not {dataflow!r}",
                                 shown)
        if self.deployment != deployment:
            raise ApiError(410, "cursor_expired",
                           f"dataflow {dataflow!r} was replaced since this cursor was made; the "
                           "rows it pointed into went with the old deployment",
                           expected="a cursor of the deployment that runs now", got=shown,
                           fix="read again without a cursor (from the committed rows)")
        if self.sink != sink:
            raise foreign_cursor(f"a cursor of sink {self.sink!r}, not {sink!r}", shown)
        if set(self.positions) != set(available):
            raise foreign_cursor(f"its logs {sorted(self.positions)} are not the output's "
                                 f"{sorted(available)}", shown)
        ahead = {log: at for log, at in self.positions.items() if at > available[log][1]}
        if ahead:
            raise foreign_cursor(f"it is ahead of the rows there are ({ahead}; ends "
                                 f"{ {log: available[log][1] for log in ahead} })", shown)


def below_committed(positions: Mapping[str, int], available: Mapping[str, tuple[int, int]]
                    ) -> dict[str, tuple[int, int]]:
    """log -> (cursor's offset, committed offset) where the cursor points at forgotten rows."""
    return {log: (at, available[log][0]) for log, at in positions.items()
            if at < available[log][0]}


def committed_rows(dataflow: str, below: Mapping[str, tuple[int, int]], cursor: str
                   ) -> ApiError:
    """The 409 for a cursor that points at rows a reader committed already."""
    return ApiError(409, "cursor_committed",
                    f"rows of dataflow {dataflow!r} before this cursor's offsets were "
                    f"committed already (by another reader, or by an earlier commit): "
                    f"{ {log: f'cursor {at}, committed {c}' for log, (at, c) in below.items()} }",
                    expected="a cursor at or after the committed offsets", got=cursor[:80],
                    fix="read again without a cursor (from the committed rows); one reader "
                        "per output, or readers that share their cursor")


def plan_page(starts: Mapping[str, int], ends: Mapping[str, int], limit: int) -> dict[str, int]:
    """log -> the offset to read up to, for at most `limit` rows shared fairly among the
    logs that have rows (a log with fewer rows than its share leaves the rest to others)."""
    pending = {log: ends[log] - at for log, at in starts.items() if ends[log] > at}
    stops = dict(starts)
    left = limit
    order = sorted(pending, key=lambda log: (pending[log], log))
    for i, log in enumerate(order):
        share = -(-left // (len(order) - i))  # ceil: small logs drain, the rest goes on
        take = min(pending[log], share)
        stops[log] = starts[log] + take
        left -= take
    return stops


def result_item(row: ResultRow) -> dict[str, Any]:
    event, ingest_ms, egress_ms = row
    return {"event": event, "ingest_ms": ingest_ms, "egress_ms": egress_ms}


def merge_tables(tables: Sequence[pa.Table]) -> pa.Table:
    """The sink instances' result tables as one, in egress order (one instance's rows in
    their order: the sort is stable)."""
    merged = concat_results(tables)
    return merged.take(pc.sort_indices(merged["_egress_ms"]))


def error_item(row: ResultRow) -> dict[str, Any]:
    """An error-output row: the record's step, kind, message and event, with its times."""
    record, ingest_ms, egress_ms = row
    return {"step": record.get("step"), "kind": record.get("kind"),
            "message": record.get("message"), "event": record.get("event"),
            "ingest_ms": ingest_ms, "egress_ms": egress_ms}
