"""A tumbling window's aggregates on columns: a batch's events grouped by window and key
in Arrow and numpy (`column_groups.tumbling_groups`), each group folded into its
accumulator in the window's state as the rows fold its events one by one."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from cameo_actors.operators.aggregates import top_add
from cameo_actors.operators.base import Event
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.column_groups import stat_columns, tumbling_groups
from cameo_actors.operators.column_keys import key_field
from cameo_actors.operators.columns import Columns
from cameo_actors.operators.windowers import AlignedWindower, Windower
from cameo_actors.operators.windowing import KeyFn


def fold_columns(windower: Windower, batch: Columns, key_fn: KeyFn | None, time_field: str,
                 watermark: float) -> bool:
    """A tumbling window of aggregates on columns: the events grouped by window and
    key in Arrow and numpy (`column_groups.tumbling_groups`), each group folded into its
    accumulator as the rows fold its events one by one: the same operations in the
    same order (a sum adds the group's values one after the other, so floats round
    as they do for rows). A max_by or top slot takes only the group's events that
    can be among its best, made dicts at once (`_chosen`)."""
    field = None if key_fn is None else key_field(key_fn)
    if not isinstance(windower, AlignedWindower) or not windower.tumbling \
            or (key_fn is not None and field is None):
        return False
    aggs = windower.aggs
    groups = tumbling_groups(batch, time_field, field, windower.size, watermark,
                             with_rows=not aggs.count_only)
    if groups is None:
        return False
    values = chosen = None
    if not aggs.count_only:
        values = stat_columns(batch, aggs.stats + tuple((f, "max") for f, _, _ in aggs.events),
                              groups.order)
        if values is None:
            return False
        if aggs.events:
            chosen = _chosen(batch, aggs.events, values, groups)
    state = windower.state
    windows, index, mask = state.windows, state.index, state.mask
    cur_end: Any = None
    w: Any = None
    bins: Any = None
    changed: Any = None
    for g, (end, k, n) in enumerate(zip(groups.ends, groups.keys, groups.counts, strict=True)):
        if end != cur_end:
            w = windows.get(end)
            if w is None:
                w = state.open(end)
            bins, changed, cur_end = index[end], state.changed_in(end), end
        had = w.get(k)
        if had is None:
            if values is None:
                w[k] = n
            else:
                assert groups.bounds is not None
                w[k] = had = _new_acc(aggs.stats, values, groups.bounds[g],
                                      groups.bounds[g + 1])
                if chosen is not None:
                    _fold_events(had, aggs.events, chosen[g], new=True)
            keys = bins.get(b := stable_hash(k) & mask)
            if keys is None:
                bins[b] = [k]
            else:
                keys.append(k)
        elif values is None:
            w[k] = had + n
        else:
            assert groups.bounds is not None
            _fold(had, aggs.stats, values, groups.bounds[g], groups.bounds[g + 1])
            if chosen is not None:
                _fold_events(had, aggs.events, chosen[g], new=False)
        if changed is not None:
            changed.add(k)
    return True


def _chosen(batch: Columns, events: Sequence[tuple[str, str, int | None]],
            values: dict[str, list[Any]], groups: Any) -> list[list[list[tuple[Any, Event]]]]:
    """Per group, per event slot: the (value, event) pairs of the group's events that can
    be among the slot's best, in order: for max_by those with the group's greatest value
    (a greater value replaces the slot, an equal one joins it), for top(n) those with a
    value at least the group's n-th largest (`top_add` places ties). Only these events
    become dicts, in one `take`."""
    bounds = groups.bounds
    picks: list[list[list[int]]] = []
    for g in range(len(groups.counts)):
        lo, hi = bounds[g], bounds[g + 1]
        per_slot = []
        for field, fn, n in events:
            seg = values[field][lo:hi]
            if fn == "max_by":
                best = max(seg)
                per_slot.append([lo + j for j, v in enumerate(seg) if v == best])
            else:
                least = heapq.nlargest(n or 1, seg)[-1]
                per_slot.append([lo + j for j, v in enumerate(seg) if v >= least])
        picks.append(per_slot)
    at = sorted({j for per_slot in picks for js in per_slot for j in js})
    rows = dict(zip(at, batch.take(groups.order[at]).to_pylist(), strict=True))
    return [[[(values[field][j], rows[j]) for j in js]
             for (field, _, _), js in zip(events, per_slot, strict=True)] for per_slot in picks]


def _fold_events(acc: list[Any], events: Sequence[tuple[str, str, int | None]],
                 chosen: list[list[tuple[Any, Event]]], new: bool) -> None:
    """`add` of a group's chosen events to the event slots that follow the numbers of
    `acc` (appended when `new`): max_by's [best, event, ...], top's [[value, event], ...]."""
    first = len(acc) - (0 if new else len(events))
    for i, ((_, fn, n), pairs) in enumerate(zip(events, chosen, strict=True)):
        if fn == "max_by":
            best = pairs[0][0]  # the group's greatest, as its first such event has it
            if new:
                acc.append([best, *(e for _, e in pairs)])
                continue
            slot = acc[first + i]
            if best > slot[0]:
                acc[first + i] = [best, *(e for _, e in pairs)]
            elif best == slot[0]:
                slot.extend(e for _, e in pairs)
        else:
            if new:
                acc.append([])
            slot = acc[first + i]
            for value, event in pairs:
                top_add(slot, value, event, n or 1)


def _new_acc(stats: Any, values: dict[str, list[Any]], lo: int, hi: int) -> list[Any]:
    """The accumulator of a group's events (rows lo..hi of `values`): `new` of the first
    event, then `add` of the others."""
    acc: list[Any] = [1]
    for field, _ in stats:
        acc.append(values[field][lo])
    if hi - lo > 1:
        _fold(acc, stats, values, lo + 1, hi)
    return acc


def _fold(acc: list[Any], stats: Any, values: dict[str, list[Any]], lo: int, hi: int) -> None:
    """`add` of a group's events, in order, to an accumulator [count, slots...]."""
    acc[0] += hi - lo
    for i, (field, stat) in enumerate(stats, 1):
        seg = values[field][lo:hi]
        if stat == "sum":
            total = acc[i]
            for v in seg:  # one by one: a float sum rounds as the rows' does
                total += v
            acc[i] = total
        elif stat == "min":
            m = min(seg)
            if m < acc[i]:
                acc[i] = m
        else:
            m = max(seg)
            if m > acc[i]:
                acc[i] = m
