"""The root of every error cameo raises on purpose."""

from __future__ import annotations


class CameoError(Exception):
    """Root of cameo's own exceptions; catch this to catch them all."""


class SpecError(CameoError, ValueError):
    """A dataflow spec is invalid.

    The message names the step, what was expected, what arrived, and the fix.
    """

    def __init__(self, step: str | None, expected: str, got: object, fix: str) -> None:
        self.step = step
        self.expected = expected
        self.got = got
        self.fix = fix
        where = f"step {step!r}" if step else "dataflow"
        super().__init__(f"{where}: expected {expected}, got {got!r}. Fix: {fix}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        # Rebuilt from its parts, so it crosses process boundaries (Ray) intact.
        return (type(self), (self.step, self.expected, self.got, self.fix))
