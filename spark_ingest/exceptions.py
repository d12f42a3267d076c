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


class CheckpointConflict(CameoSparkError, UserError):
    """A Spark checkpoint (or a file sink's log) belongs to another query: resuming it
    would read another input's positions (a dataflow deployed again under a name used
    before, with another input folder) or skip the new query's first batches. Refused
    before anything starts; `subject` is the checkpoint directory (or the sink's path).

    >>> print(CheckpointConflict("/ck/d/in-s", "a checkpoint of d/in-s reading json from new/",
    ...                          "one of d/in-s reading json from old/", "start fresh"))
    Spark checkpoint '/ck/d/in-s': expected a checkpoint of d/in-s reading json from new/, got 'one of d/in-s reading json from old/'. Fix: start fresh
    """

    @property
    def where(self) -> str:
        return f"Spark checkpoint {self.subject!r}"


class SparkQueryFailed(CameoSparkError):
    """A Spark query of a dataflow stopped with an error (its input, output or errors query).

    Raised by `SparkTier.drain`, `stop`, `stop_all` and `raise_if_failed`, after the
    dataflow's other queries were stopped between micro-batches.

    Attributes:
        dataflow: the dataflow's name.
        query: the Spark query's name ("cameo-in-<dataflow>-<source>", ...).
        role: "input", "output" or "errors".
        step: the source or sink step the query serves ("errors" for the errors query).
        spark_message: Spark's message (its exception, without the query's plan).
        fix: what to do.
        others: the names of the dataflow's other queries that failed too.
    """

    def __init__(self, dataflow: str, query: str, role: str, step: str, spark_message: str,
                 fix: str, others: tuple[str, ...] = ()) -> None:
        self.dataflow = dataflow
        self.query = query
        self.role = role
        self.step = step
        self.spark_message = spark_message
        self.fix = fix
        self.others = tuple(others)
        also = f" (failed too: {', '.join(self.others)})" if self.others else ""
        super().__init__(f"the {role} query {query!r} of dataflow {dataflow!r} (step {step!r}) "
                         f"failed in Spark{also}: {spark_message}. Fix: {fix}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.dataflow, self.query, self.role, self.step,
                             self.spark_message, self.fix, self.others))
