"""Results read as columns: result chunks as one Arrow table, the times last."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cameo_actors.operators.columns import is_columns
from cameo_actors.operators.exceptions import ResultsNotColumnar

#: The times a result table carries after the results' own columns.
RESULT_TIMES = ("_ingest_ms", "_egress_ms")


def concat_results(tables: Sequence[pa.Table]) -> pa.Table:
    """Result tables as one (a column some lack is null there; ints beside floats become
    floats), the times last. ResultsNotColumnar if a column's kinds do not mix."""
    if not tables:
        return pa.table({name: pa.array([], pa.float64()) for name in RESULT_TIMES})
    try:
        merged = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ResultsNotColumnar.of_arrow(exc) from None
    return merged.select([n for n in merged.column_names if n not in RESULT_TIMES]
                         + list(RESULT_TIMES))


def results_table(chunks: Sequence[tuple[Any, float, float]]) -> pa.Table:
    """Result chunks (events, ingest_ms, egress_ms) as one table: the events' columns (those
    of rows inferred over every row; ints beside floats become floats), then `_ingest_ms`
    and `_egress_ms`. ResultsNotColumnar if the values do not form columns.

    >>> results_table([([{"k": 1}], 1.0, 2.0), ([{"k": 2, "v": "x"}], 1.0, 3.0)]).to_pylist()[1]
    {'k': 2, 'v': 'x', '_ingest_ms': 1.0, '_egress_ms': 3.0}
    """
    tables = []
    try:
        for events, ingest_ms, egress_ms in chunks:
            if not is_columns(events):
                events = pa.RecordBatch.from_struct_array(pa.array(events))
            n = len(events)
            tables.append(pa.Table.from_batches([events])
                          .append_column("_ingest_ms", pa.array(np.full(n, float(ingest_ms))))
                          .append_column("_egress_ms", pa.array(np.full(n, float(egress_ms)))))
        return concat_results(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ResultsNotColumnar.of_arrow(exc) from None
