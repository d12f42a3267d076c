"""Keys on columns: the field a key function reads, whether a column can key, and a
batch split by the owners of its keys' bins (keyed routing)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Up to this many parts, a batch is split by a pass per part, not by sorting it.
FEW_PARTS = 4


def key_field(key_fn: Any) -> str | None:
    """The field a key function reads as it is (`compile_scalar` of a field name), or None."""
    if isinstance(key_fn, operator.itemgetter):
        args = key_fn.__reduce__()[1]
        if len(args) == 1 and isinstance(args[0], str):
            return args[0]
    return None


def hashable_column(batch: pa.RecordBatch, name: str) -> bool:
    """Whether every value of a column is a key (hashable) as Python reads it."""
    if name not in batch.schema.names:
        return False
    t = batch.schema.field(name).type
    return not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t))


def split_by_key(batch: pa.RecordBatch, name: str, owner_of: Callable[[Any], str]
                 ) -> dict[str, pa.RecordBatch]:
    """A batch's events by the owner of their key (`owner_of(key)`: the route's lookup,
    which remembers keys it has seen), in order within each part, as the rows are
    routed. Each distinct key is looked up once."""
    encoded = pc.dictionary_encode(batch.column(name), null_encoding="encode")
    targets = [owner_of(v) for v in encoded.dictionary.to_pylist()]
    number: dict[str, int] = {}
    of_value = np.fromiter((number.setdefault(t, len(number)) for t in targets), np.int64,
                           len(targets))
    if len(number) == 1:
        return {targets[0]: batch}
    of_row = of_value[encoded.indices.to_numpy(zero_copy_only=False)]
    # The rows in part order, gathered by one take; each part is then a slice of it.
    if len(number) <= FEW_PARTS:  # a pass per part costs less than a sort
        rows = [np.flatnonzero(of_row == i) for i in range(len(number))]
        order = np.concatenate(rows)
        bounds = np.cumsum([0, *(len(r) for r in rows)])
    else:
        order = np.argsort(of_row, kind="stable")
        bounds = np.searchsorted(of_row[order], np.arange(len(number) + 1))
    grouped = batch.take(pa.array(order))
    return {t: grouped.slice(bounds[i], bounds[i + 1] - bounds[i]) for t, i in number.items()}
