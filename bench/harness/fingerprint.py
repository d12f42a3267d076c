"""An order-independent fingerprint of a multiset of result rows, in memory that grows
with sinks and windows, never with rows: a run's results against `run_local`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

#: Row hashes are summed modulo 2**64.
MASK = (1 << 64) - 1


class Fingerprint:
    """Rows per sink and the sum of their hashes mod 2**64; equal fingerprints hold the
    same multiset of rows (but for a hash collision).

    Args:
        fields: the fields that tell rows apart; by default all of them, floats rounded
            to 6 digits (sums in another order then compare equal). Naming a few is faster.
        per_window: also count rows and sum this field per `window_start`, to say which
            windows differ (`differing_windows`).

    >>> a, b = Fingerprint(), Fingerprint()
    >>> a.add("out", {"k": "x", "n": 1.0}); a.add("out", {"k": "y", "n": 2})
    >>> b.add("out", {"n": 2, "k": "y"}); b.add("out", {"k": "x", "n": 1.0000000001})
    >>> a == b, a.total
    (True, 2)
    """

    def __init__(self, fields: Sequence[str] | None = None, per_window: str | None = None) -> None:
        self.rows: dict[str, int] = {}
        self.hash = 0
        self.windows: dict[int, list[int]] = {}
        self._key = itemgetter(*fields) if fields else _canonical
        self._per_window = per_window

    def add(self, sink: str, row: Mapping[str, Any]) -> None:
        self.rows[sink] = self.rows.get(sink, 0) + 1
        self.hash = (self.hash + hash((sink, self._key(row)))) & MASK
        if self._per_window is not None:
            ws, n = row["window_start"], row[self._per_window]
            w = self.windows.get(ws)
            if w is None:
                self.windows[ws] = [1, n]
            else:
                w[0] += 1
                w[1] += n

    @property
    def total(self) -> int:
        """Rows over every sink."""
        return sum(self.rows.values())

    def differing_windows(self, other: Fingerprint) -> list[int]:
        """The window starts whose rows or summed field differ (with `per_window`)."""
        return sorted(ws for ws in set(self.windows) | set(other.windows)
                      if self.windows.get(ws) != other.windows.get(ws))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Fingerprint) and self.rows == other.rows
                and self.hash == other.hash and self.windows == other.windows)

    __hash__ = None  # type: ignore[assignment]


def _canonical(row: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in row.items()))
