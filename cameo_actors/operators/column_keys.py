"""Keys on columns: the field a key function reads, whether a column can key, and a
batch split by the owners of its keys' bins (keyed routing)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.operators.bins import stable_hash


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


def split_by_key(batch: pa.RecordBatch, name: str, owners: list[str], mask: int
                 ) -> dict[str, pa.RecordBatch]:
    """A batch's events by the owner of their key's bin (`owners[stable_hash(key) & mask]`,
    as the rows are routed), in order within each part. Each distinct key is hashed once."""
    encoded = pc.dictionary_encode(batch.column(name), null_encoding="encode")
    targets = [owners[stable_hash(v) & mask] for v in encoded.dictionary.to_pylist()]
    distinct = list(dict.fromkeys(targets))
    if len(distinct) == 1:
        return {distinct[0]: batch}
    number = {t: i for i, t in enumerate(distinct)}
    of_value = np.array([number[t] for t in targets], dtype=np.int64)
    of_row = of_value[encoded.indices.to_numpy(zero_copy_only=False)]
    order = np.argsort(of_row, kind="stable")
    bounds = np.searchsorted(of_row[order], np.arange(len(distinct) + 1))
    return {t: batch.take(pa.array(order[bounds[i]:bounds[i + 1]]))
            for i, t in enumerate(distinct)}
