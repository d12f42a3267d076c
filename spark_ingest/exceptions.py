"""Errors of the Spark tier. Every one names what to fix; an option error names the option."""

from __future__ import annotations

from cameo_actors.errors import CameoError


class CameoSparkError(CameoError):
    """Root of the Spark tier's errors (raised in Spark's Python workers, shown by Spark)."""


class OptionError(CameoSparkError, ValueError):
    """A `cameo` source or sink option is missing or wrong.

    The message names the option, what was expected, what arrived, and the fix:

    >>> str(OptionError("dataflow", "the name of a running dataflow", None,
    ...                 'add .option("dataflow", "<name>")'))
    'cameo option \\'dataflow\\': expected the name of a running dataflow, got None. Fix: add .option("dataflow", "<name>")'
    """

    def __init__(self, option: str, expected: str, got: object, fix: str) -> None:
        self.option = option
        self.expected = expected
        self.got = got
        self.fix = fix
        super().__init__(f"cameo option {option!r}: expected {expected}, got {got!r}. Fix: {fix}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.option, self.expected, self.got, self.fix))


class OffsetError(CameoSparkError):
    """A Spark checkpoint's offsets do not fit the runtime's result logs (a redeployed
    dataflow, a second reader on the same sink): resuming would lose or repeat results."""
