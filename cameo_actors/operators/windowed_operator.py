"""The base of the windowed operators (`WindowedOperator`): their rejects with counts,
the snapshot envelope (configuration check, counters), a checkpoint's snapshot in
steps, and the interface of state kept by bin (`use_bins`, `state_bins`,
`take_bins`, `put_state`) that live migration moves."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import msgpack

from cameo_actors.operators.base import Operator
from cameo_actors.operators.bins import check_bins
from cameo_actors.operators.keyed_windows import KeyedWindows
from cameo_actors.operators.state_store import (
    IN_MEMORY,
    StateBackend,
    backend_folder,
    is_store_piece,
    joined,
)
from cameo_actors.operators.stored_keys import StoredState
from cameo_actors.operators.stored_windows import StoredWindows, store_entries
from cameo_actors.operators.windowing import Rejects


class WindowedOperator(Operator):
    """Base of the windowed operators: rejects with counts, and a snapshot of
    the configuration, the counters and the subclass's window state.

    Subclasses implement `_config` (what a snapshot must match),
    `_snapshot_windows` and `_restore_windows`, and for live migration of
    keys `state_keys`, `take_state` and `_put_state`.
    """

    stateful = True
    #: What a configuration mismatch calls this operator.
    noun = "window"

    def __init__(self, step_id: str, n_inputs: int = 1) -> None:
        super().__init__(step_id, n_inputs)
        self.rejects = Rejects(self.error)
        #: a checkpoint's lists of rows per key still to pack (state kept per key), and
        #: the pieces packed so far
        self._rows_to_pack: list[tuple[str, Iterator[Any]]] = []
        self._row_pieces: list[bytes] = []

    @property
    def late_count(self) -> int:
        """Events routed to the error output as late."""
        return self.rejects.late_count

    @property
    def malformed_count(self) -> int:
        """Events routed to the error output as malformed."""
        return self.rejects.malformed_count

    def _config(self) -> list[Any]:
        raise NotImplementedError

    def _snapshot_windows(self) -> dict[str, Any]:
        raise NotImplementedError

    def _restore_windows(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- state by bin (live migration, `bins.py`) ---------------------------------------
    def use_bins(self, bins: int, backend: StateBackend = IN_MEMORY) -> None:
        """Keep the keyed state in `bins` bins (the pool's count, a power of two), as
        the routing table does, in the pool's `backend` (where the operator kind has one:
        every windowed kind and processes); set before any state comes in.

        Raises:
            ValueError: `bins` is not a power of two, or state is here already.
        """
        check_bins(bins, f"step {self.step_id!r}")
        if self.state_bins():
            raise ValueError(f"step {self.step_id!r}: the bin count is set before any state "
                             f"comes in; this operator holds state already")
        self._use_bins(bins, backend)

    def _use_bins(self, bins: int, backend: StateBackend) -> None:
        raise NotImplementedError

    def state_keys(self) -> list[Any]:
        """Every key that has state here (as the key function returns it: tuples
        stay tuples), in no particular order; a key in several windows may be
        listed once per window."""
        raise NotImplementedError

    def state_bins(self) -> list[int]:
        """The bins holding state here, ascending."""
        raise NotImplementedError

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Remove every piece of state of `bins` and return it as msgpack-able rows
        for `put_state` of an identically configured operator with as many bins, and
        how many entries (a key in a window) the rows hold: what a step of moving
        bins costs. Costs the bins taken, not the whole state. Watermarks and
        counters stay: they are the operator's, not the keys'. The row format is
        the subclass's."""
        raise NotImplementedError

    def put_state(self, rows: list[Any], owned: bool = False) -> None:
        """Add state that `take_bins` of an identically configured operator gave
        away (possibly after a msgpack round trip). The rows are copied unless
        `owned` (they are this operator's to keep, as just unpacked).

        Raises:
            ValueError: a key of `rows` already has state here (a protocol bug:
                a key's state lives in one place); nothing is changed then.
        """
        try:
            self._put_state(rows, owned)
        except ValueError as exc:
            raise ValueError(f"step {self.step_id!r}: {exc}") from exc

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """The operator's state as msgpack-able data (lists, dicts with str keys,
        numbers, strings, None; a join's buffered events as they are). Tuple
        keys are stored as lists."""
        state = self._envelope()
        state.update((k, list(v) if isinstance(v, Iterator) else v)
                     for k, v in self._snapshot_windows().items())
        return state

    def _envelope(self) -> dict[str, Any]:
        """What a snapshot holds besides the keyed state: watermarks, configuration, counters."""
        state = super().snapshot()
        state.update(
            config=self._config(),
            late_count=self.rejects.late_count,
            malformed_count=self.rejects.malformed_count,
        )
        return state

    def on_batch(self, events: Any, port: int = 0) -> Any:
        """As `Operator.on_batch`; then a stored state's cache is kept to its bound."""
        out = super().on_batch(events, port)
        state = self._aligned_state()
        if state is not None and state.__class__ is StoredWindows:
            state.after_batch()
        else:
            stored = self._stored_state()
            if stored is not None:
                stored.after_batch()
        return out

    def disk_bytes(self) -> int:
        state = self._aligned_state()
        if isinstance(state, StoredWindows):
            return state.disk_bytes()
        stored = self._stored_state()
        return stored.disk_bytes() if stored is not None else 0

    # -- a checkpoint's snapshot in steps ----------------------------------------------------
    def _aligned_state(self) -> KeyedWindows[Any] | None:
        """The aligned windows' state, which a checkpoint packs bin by bin in steps (the
        runtime runs nothing else at the activation until the last); None when the state
        is kept otherwise (packed at once)."""
        return None

    def _stored_state(self) -> StoredState | None:
        """The state kept per key in a store (the rocksdb backend), whose cut is its files
        after any rows (`_cut_fields`); None when the state is all in the rows."""
        return None

    def _cut_fields(self) -> dict[str, Any]:
        """What a checkpoint's cut holds besides `_stored_state`'s files: the snapshot's
        fields, lists of rows as iterators (packed in steps)."""
        return self._snapshot_windows()

    def begin_snapshot(self, incremental: bool = False) -> dict[str, Any]:
        state = self._aligned_state()
        head = self._envelope()
        if state is None:  # kept per key: its lists of rows (iterators) packed in steps
            self._rows_to_pack = []
            for k, v in self._cut_fields().items():
                if isinstance(v, Iterator):
                    self._rows_to_pack.append((k, v))
                    head[k] = []
                else:
                    head[k] = v
            head["listed"] = [k for k, _ in self._rows_to_pack]
            stored = self._stored_state()
            if stored is not None and stored.start_packing(incremental):
                head["delta"] = True  # the store's new files: its rows are none
            return head
        head["aligned"] = {}
        if state.start_packing(incremental):
            head["aligned"]["ends"] = sorted(state.windows)
            head["delta"] = True
        return head

    def snapshot_step(self, budget: int) -> bool:
        state = self._aligned_state()
        if state is not None:
            return state.pack_some(budget)
        to_pack = self._rows_to_pack
        while to_pack and budget > 0:
            field, rows = to_pack[0]
            chunk = list(islice(rows, budget))
            if len(chunk) < budget:
                to_pack.pop(0)
            if chunk:
                budget -= len(chunk)
                self._row_pieces.append(msgpack.packb([field, chunk], use_bin_type=True))
        if to_pack:
            return False
        stored = self._stored_state()
        return stored is None or (budget > 0 and stored.pack_some(budget))

    def index_step(self, budget: int) -> bool:
        state = self._aligned_state()
        return state is None or state.index_some(budget)

    def end_snapshot(self, head: dict[str, Any]) -> dict[str, Any]:
        state = self._aligned_state()
        if state is not None and "aligned" in head:
            head["pieces"] = state.packed()
        elif "listed" in head:
            head["pieces"], self._row_pieces, self._rows_to_pack = self._row_pieces, [], []
            stored = self._stored_state()
            if stored is not None:
                head["pieces"] += stored.packed()
        return head

    def restore(self, state: dict[str, Any]) -> None:
        """Load a `snapshot` (possibly after a msgpack round trip) into this operator.

        Raises:
            ValueError: the snapshot is of a differently configured operator.
        """
        if list(state["config"]) != self._config():
            raise ValueError(f"step {self.step_id!r}: snapshot is of a {self.noun} configured as "
                             f"{state['config']}, this one is {self._config()}")
        super().restore(state)
        self.rejects.late_count = state["late_count"]
        self.rejects.malformed_count = state["malformed_count"]
        if "listed" in state:  # rows per key packed in steps (`end_snapshot`)
            state = {**state, **{field: [] for field in state["listed"]}, "stored": []}
            for piece in state.get("pieces", ()):  # none: no key had state at the cut
                if isinstance(piece, bytes):  # as the steps packed it, not unpacked yet
                    piece = msgpack.unpackb(piece, raw=False, strict_map_key=False)
                piece = joined(piece)
                if is_store_piece(piece):
                    state["stored"].append(piece)
                else:
                    state[piece[0]].extend(piece[1])
        elif "pieces" in state:  # aligned windows packed in steps (`end_snapshot`)
            pieces = [joined(p) for p in state["pieces"]]
            stored = [p for p in pieces if is_store_piece(p)]
            if stored and not isinstance(self._aligned_state(), StoredWindows):
                # a store's checkpoint, restored in memory (the pool changed its backend)
                pieces = [*store_entries(stored, backend_folder(None)),
                          *(p for p in pieces if not is_store_piece(p))]
            state = {**state, "aligned": {**state["aligned"], "pieces": pieces}}
        self._restore_windows(state)
