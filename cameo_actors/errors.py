"""The root of every error cameo raises on purpose, and the one shape of bad user input.

A `UserError` names where the input is wrong, what was expected, what arrived
and the fix, in one message format; each kind words its "where" (a step, a
setting, a Spark option) and is rebuilt from those four parts when pickled, so
it crosses process boundaries (Ray, Spark's Python workers) intact.

>>> str(SpecError("w", "size_ms > 0", 0, "use 1000"))
"step 'w': expected size_ms > 0, got 0. Fix: use 1000"
>>> str(SpecError(None, "a JSON object", "invalid JSON", "send valid JSON"))
"dataflow: expected a JSON object, got 'invalid JSON'. Fix: send valid JSON"
"""

from __future__ import annotations


class CameoError(Exception):
    """Root of cameo's own exceptions; catch this to catch them all."""


class UserError(CameoError, ValueError):
    """Bad user input, refused before anything ran.

    The message is "<where>: expected <expected>, got <got!r>. Fix: <fix>";
    subclasses word <where> from `subject` (see `where`).

    Attributes:
        subject: what the input is about: a step id, a setting, an option name.
        expected: what would have been accepted.
        got: what arrived.
        fix: what to do.
    """

    def __init__(self, subject: str | None, expected: str, got: object, fix: str) -> None:
        self.subject = subject
        self.expected = expected
        self.got = got
        self.fix = fix
        super().__init__(f"{self.where}: expected {expected}, got {got!r}. Fix: {fix}")

    @property
    def where(self) -> str:
        """How the message names the subject."""
        return str(self.subject)

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        # Rebuilt from its parts: Exception's own pickling would call __init__(message).
        return (type(self), (self.subject, self.expected, self.got, self.fix))


class SpecError(UserError):
    """A dataflow spec is invalid.

    The message names the step (or the dataflow as a whole when `step` is None),
    what was expected, what arrived, and the fix.
    """

    @property
    def step(self) -> str | None:
        """The step at fault; None for the dataflow as a whole."""
        return self.subject

    @property
    def where(self) -> str:
        return f"step {self.subject!r}" if self.subject else "dataflow"


class ReconfigError(UserError):
    """A reconfiguration (scale, migrate, rebalance, add or remove executors) that cannot
    be done as asked; nothing changed. `subject` names the dataflow and step, or the pool."""


class ReconfigConflict(ReconfigError):
    """A reconfiguration that conflicts with one under way, or with the pool's state
    (the last executor); nothing changed. Retry once the other one is done."""
