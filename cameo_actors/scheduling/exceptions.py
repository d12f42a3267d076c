"""Errors of the scheduling layer.

Bad arguments raise the built-in `ValueError` / `TypeError` (or a subclass of
them defined here); conditions that only make sense in cameo raise a
`SchedulingError`, a `CameoError`.
"""

from __future__ import annotations

from collections.abc import Iterable

from cameo_actors.errors import CameoError


class SchedulingError(CameoError):
    """Root of the scheduling layer's own errors."""


class UnknownPolicyError(SchedulingError, ValueError):
    """`get_policy` was asked for a name no factory is registered under."""

    def __init__(self, name: object, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        super().__init__(
            f"unknown scheduling policy {name!r}; known policies: {', '.join(self.known)}. "
            "Fix: use one of those names, or register yours with register_policy(name, factory)."
        )


class DuplicatePolicyError(SchedulingError, ValueError):
    """`register_policy` was given a name that is taken (pass replace=True to override)."""


class UnknownActivationError(SchedulingError, LookupError):
    """A message, feedback or call named an activation the scheduler does not host."""

    def __init__(self, activation_id: object, what: str) -> None:
        self.activation_id = activation_id
        super().__init__(
            f"{what}: no activation {activation_id!r} on this scheduler. "
            "Fix: add_activation() it first, or drop messages for cancelled dataflows."
        )


class DuplicateActivationError(SchedulingError, ValueError):
    """`add_activation` was given an id that is already hosted."""


class PolicyKeyError(SchedulingError, TypeError):
    """A policy produced a key that cannot be ordered (None or NaN)."""
