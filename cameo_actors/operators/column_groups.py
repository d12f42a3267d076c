"""A tumbling window's input on columns: the events grouped by window and key, and
the values its aggregates read, in group order (`window_columns` folds them into the
window's state)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.operators.columns import EXACT_FLOAT_INT


@dataclass(slots=True)
class Groups:
    """A message's events grouped by tumbling window and key, the groups in the order of
    their first event (the order the rows open windows and insert keys in)."""

    ends: list[Any]
    keys: list[Any]
    counts: list[int]
    #: the events' rows by group (group g: order[bounds[g]:bounds[g + 1]]), in order
    #: within a group; None when only counts were asked for
    order: Any = None
    bounds: list[int] | None = None


def tumbling_groups(batch: pa.RecordBatch, time_field: str, key: str | None, size: float,
                    watermark: float, with_rows: bool = False) -> Groups | None:
    """The groups of a tumbling window's input, each window's end computed as the rows
    compute it, `t - t % size + size`, in the time column's type. None (run the rows)
    when an event's time is not a finite number within 2**53, an event is late (its
    window ended by `watermark`), or a key is not a scalar the rows would read alike."""
    names = batch.schema.names
    if time_field not in names or (key is not None and key not in names) or not len(batch):
        return None
    times = batch.column(names.index(time_field))
    if times.null_count or times.type not in (pa.int64(), pa.float64()):
        return None
    t = times.to_numpy()
    if times.type == pa.float64() or isinstance(size, float):
        t = t.astype(np.float64)
        if not np.isfinite(t).all():
            return None
    if np.abs(t).max() > EXACT_FLOAT_INT:
        return None
    ends = t - np.mod(t, size) + size
    if (ends <= watermark).any():
        return None  # late events: the rows report each
    if key is None:
        values: list[Any] = [None]
        of_key = np.zeros(len(batch), dtype=np.int64)
    else:
        col = batch.column(names.index(key))
        if not (pa.types.is_integer(col.type) or pa.types.is_string(col.type)
                or pa.types.is_boolean(col.type) or pa.types.is_large_string(col.type)):
            return None  # floats (NaN is a new key per event in a dict), lists, structs
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        values = encoded.dictionary.to_pylist()
        of_key = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    unique_ends, of_end = np.unique(ends, return_inverse=True)  # a message spans few windows
    nk, end_list = len(values), unique_ends.tolist()
    # Hashed, not sorted: the dictionary holds each (window, key) in order of first event.
    encoded = pc.dictionary_encode(pa.array(of_end.astype(np.int64) * nk + of_key))
    codes = encoded.dictionary.to_numpy().tolist()
    counts = np.bincount(encoded.indices.to_numpy(), minlength=len(codes))
    groups = Groups([end_list[c // nk] for c in codes], [values[c % nk] for c in codes],
                    counts.tolist())
    if with_rows:
        groups.order = pc.sort_indices(encoded.indices).to_numpy()  # stable: rows in order
        groups.bounds = [0, *np.cumsum(counts).tolist()]
    return groups


def stat_columns(batch: pa.RecordBatch, stats: Sequence[tuple[str, str]], order: Any
                 ) -> dict[str, list[Any]] | None:
    """The values of the fields aggregates read, as Python numbers in `order` (by group);
    None (run the rows) when a field is missing, has a null or is not int64 or float64
    (the rows report such events), or holds a NaN or a -0.0 a min or max reads (the rows
    keep the first of equal values; an array's min does not say which)."""
    names = batch.schema.names
    out: dict[str, list[Any]] = {}
    for field, stat in stats:
        if field not in names:
            return None
        col = batch.column(names.index(field))
        if col.null_count or col.type not in (pa.int64(), pa.float64()):
            return None
        values = col.to_numpy()
        if stat != "sum" and col.type == pa.float64() and (
                np.isnan(values).any() or (np.signbit(values) & (values == 0)).any()):
            return None
        if field not in out:
            out[field] = values[order].tolist()
    return out
