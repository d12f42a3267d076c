"""The operator layer's errors of bad user input: columns that do not fit a source's
schema, and results that do not form columns."""

from __future__ import annotations

from cameo_actors.errors import UserError


class ColumnsRefused(UserError):
    """A columnar batch that does not fit the source's schema; nothing of it was applied.
    The message names the source and the column, what was expected, what arrived, the fix."""

    def __init__(self, source: str, column: str | None, expected: str, got: str, fix: str) -> None:
        self.source, self.column = source, column
        super().__init__(source, expected, _Shown(got), fix)

    @property
    def where(self) -> str:
        column = f": column {self.column!r}" if self.column is not None else ""
        return f"source {self.source!r}{column}"

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.source, self.column, self.expected, str(self.got), self.fix))


class _Shown(str):
    """What arrived, shown as it is (not quoted)."""

    def __repr__(self) -> str:
        return str(self)


class ResultsNotColumnar(UserError):
    """Results whose values do not form Arrow columns (a field of mixed kinds, say): read
    them as rows (JSON or msgpack)."""

    @classmethod
    def of_arrow(cls, exc: Exception) -> ResultsNotColumnar:
        """Arrow's refusal (`exc`) to form columns of the results, as this error."""
        return cls("results", "fields that each hold one kind of value",
                   _Shown(f"values that do not form Arrow columns ({exc})"),
                   "read these results as JSON or msgpack")
