"""Errors of the Spark tier. Every one names what to fix; an option error names the option."""

from __future__ import annotations

from cameo_actors.errors import CameoError, UserError


class CameoSparkError(CameoError):
    """Root of the Spark tier's errors (raised in Spark's Python workers, shown by Spark)."""


class OptionError(CameoSparkError, UserError):
    """A `cameo` source or sink option is missing or wrong.

    The message names the option, what was expected, what arrived, and the fix:

    >>> str(OptionError("dataflow", "the name of a running dataflow", None,
    ...                 'add .option("dataflow", "<name>")'))
    'cameo option \\'dataflow\\': expected the name of a running dataflow, got None. Fix: add .option("dataflow", "<name>")'
    """

    @property
    def option(self) -> str:
        """The option at fault."""
        return str(self.subject)

    @property
    def where(self) -> str:
        return f"cameo option {self.subject!r}"


class OffsetError(CameoSparkError):
    """A Spark checkpoint's offsets do not fit the runtime's result logs (a redeployed
    dataflow, a second reader on the same sink): resuming would lose or repeat results."""
