"""Dirigo's dual-mode window (Xu et al., arXiv 2308.03615): lessees relieve a hot key.

A keyed window (the *lessor*) can lend events to *lessee* instances that fold
them into partial accumulators in parallel, on the same rules. A lessee never
fires a window: the watermark that would fire one is a critical message, run
on the lessor after every lessee's partials are merged into it. Moving key
bins between instances cannot split one hot key; lessees can, and the results
are those of a run without them (aggregates merge exactly).

The runtime's order at each watermark ``W`` of the step:

1. every lessee gets ``W`` (`on_watermark`; it fires nothing);
2. its `LesseeWindow.take_partials` rows go to the owner of each row's key
   (`LesseeWindow.key_of_row`, routed by the same table as events), which
   folds them in with `WindowOperator.merge_partials`;
3. then the lessor gets ``W`` and fires.

A partial that reaches a lessor after its window fired is an error record of
kind "late", never dropped silently.

Only tumbling and sliding windows can have lessees (`can_lease`): a session
grows by merging across events, so partial sessions would need re-merging.

>>> from types import SimpleNamespace as A
>>> kw = dict(kind="tumbling", size_ms=10, time_field="t",
...           aggregates=[A(name="n", fn="count", field=None)], key_fn=lambda e: e["k"])
>>> lessor, lessee = WindowOperator("w", **kw), LesseeWindow("w", **kw)
>>> _ = lessor.on_batch([{"t": 1, "k": "hot"}]); _ = lessee.on_batch([{"t": 2, "k": "hot"}])
>>> _ = lessee.on_watermark(10)
>>> rows = lessee.take_partials(); rows
[[10, 'hot', 1]]
>>> lessor.merge_partials(rows, Output())
>>> lessor.on_watermark(10).events
[{'key': 'hot', 'window_start': 0, 'window_end': 10, 't': 9, 'n': 2}]
"""

from __future__ import annotations

from typing import Any

from cameo_actors.dataflow import spec as steps
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import Output
from cameo_actors.operators.build import key_function
from cameo_actors.operators.windowers import AlignedWindower
from cameo_actors.operators.windowing import decode_key, encode_key
from cameo_actors.operators.windows import WindowOperator

__all__ = ["LEASABLE_KINDS", "LesseeWindow", "build_lessee", "can_lease"]

#: The window kinds that can have lessees.
LEASABLE_KINDS = ("tumbling", "sliding")


def can_lease(step: Any) -> str | None:
    """None when `step` can have lessees, else a sentence saying why not.

    >>> from cameo_actors.dataflow.spec import WindowStep
    >>> can_lease(WindowStep(id="w", inputs=("k",), kind="sliding", size_ms=10, slide_ms=5))
    >>> can_lease(WindowStep(id="s", inputs=("k",), kind="session", gap_ms=10)).split(":")[0]
    "step 's' is a session window"
    """
    if not isinstance(step, steps.WindowStep):
        return (f"step {getattr(step, 'id', step)!r} is a {type(step).__name__}: only window "
                f"steps (tumbling or sliding) can have lessees")
    if step.kind not in LEASABLE_KINDS:
        return (f"step {step.id!r} is a {step.kind} window: a lessee's partial sessions would "
                f"need re-merging as later events bridge them; only {' and '.join(LEASABLE_KINDS)} "
                f"windows can have lessees")
    return None  # every aggregate (count, sum, min, max, avg, max_by, top) merges


class LesseeWindow(WindowOperator):
    """A lessee of a tumbling or sliding `WindowOperator`: the same constructor and
    admission (bad time, key or aggregate input, late behind its own watermark: the
    same error records), partial accumulators per (window end, key), and no firing.

    Snapshots and restores like a window (a lessee's snapshot only restores into a
    lessee). Live migration: the window's hooks are inherited, but a partial is not
    a key's whole state, so the runtime drains lessees (`take_partials`, merged at
    the owners) before it moves a step's bins; a drained lessee has nothing to move.

    Raises:
        ValueError: a session window, or any argument `WindowOperator` refuses.
    """

    noun = "window lessee"

    def __init__(self, step_id: str, **kwargs: Any) -> None:
        kind = kwargs.get("kind")
        if kind not in LEASABLE_KINDS:
            raise ValueError(f"step {step_id!r}: a {kind} window cannot have lessees; only "
                             f"{' and '.join(LEASABLE_KINDS)} windows can")
        super().__init__(step_id, **kwargs)
        self._aligned: AlignedWindower = self._windower  # type: ignore[assignment]

    def advance_to(self, watermark: float, out: Output) -> None:
        """Fire nothing: the lessor fires, after merging the partials."""

    def take_partials(self) -> list[list[Any]]:
        """Every partial row ``[window_end, key, acc]`` (keys encoded with `encode_key`,
        msgpack-able), by window end, keys in first-seen order; the state is cleared."""
        state = self._aligned.state
        windows = state.windows
        state.windows, state.index, state.ends, state.changed = {}, {}, [], None
        state.to_index = []
        # The accumulators leave this operator: no copy needed.
        return [[end, encode_key(k), acc] for end in sorted(windows)
                for k, acc in windows[end].items()]

    @staticmethod
    def key_of_row(row: list[Any]) -> Any:
        """The key of a `take_partials` row as the step's key function returned it."""
        return decode_key(row[1])

    def _config(self) -> list[Any]:
        return [*super()._config(), "lessee"]


def build_lessee(spec: DataflowSpec, step: Any, resolver: Any = None, **_options: Any
                 ) -> LesseeWindow:
    """A fresh lessee of window `step` of a validated `spec`, built as `build.build_operator`
    builds the window (`resolver` and options accepted for the same call, unused).

    Raises:
        ValueError: the step cannot have lessees (`can_lease` says why).
    """
    why = can_lease(step)
    if why is not None:
        raise ValueError(why)
    return LesseeWindow(step.id, kind=step.kind, size_ms=step.size_ms, slide_ms=step.slide_ms,
                        gap_ms=step.gap_ms, aggregates=list(step.aggregates),
                        time_field=step.time_field, key_fn=key_function(spec, step.inputs[0]))
