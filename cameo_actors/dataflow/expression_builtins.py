"""What a compiled expression may call: the whitelisted functions, the checked `*` and
`%` that refuse non-numbers, and the restricted globals the compiled code runs with.

The checker (`expression_parser`) allows a call only of a name listed here, with as
many arguments as listed; the compiler (`expressions`) gives the code these globals
and nothing else.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

#: Largest |ndigits| accepted by round(); round(1, -10**9) would compute 10**(10**9).
MAX_ROUND_DIGITS = 100

# Names of the checked operators in the generated code. Users cannot write names
# starting with "_", so these never collide with a field or a function.
MUL = "_mul"
MOD = "_mod"


def _coalesce(*values: Any) -> Any:
    """The first value that is not None, or None."""
    for value in values:
        if value is not None:
            return value
    return None


def _is_null(value: Any) -> bool:
    return value is None


def _round(number: Any, ndigits: Any = None) -> Any:
    if ndigits is None:
        return round(number)
    # round(int, -n) computes 10**n: cap n so a spec cannot stall a worker.
    if isinstance(ndigits, int) and abs(ndigits) > MAX_ROUND_DIGITS:
        raise ValueError(f"round(): ndigits must be within +-{MAX_ROUND_DIGITS}, got {ndigits}")
    return round(number, ndigits)


def _contains(s: Any, sub: Any) -> bool:
    return sub in s


# name -> (function, fewest positional arguments, most or None for any number).
# The str methods are taken unbound: they refuse non-strings with a TypeError.
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "min": (min, 1, None),
    "max": (max, 1, None),
    "len": (len, 1, 1),
    "int": (int, 1, 2),
    "float": (float, 1, 1),
    "str": (str, 1, 1),
    "bool": (bool, 1, 1),
    "lower": (str.lower, 1, 1),
    "upper": (str.upper, 1, 1),
    "strip": (str.strip, 1, 2),
    "startswith": (str.startswith, 2, 2),
    "endswith": (str.endswith, 2, 2),
    "contains": (_contains, 2, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "coalesce": (_coalesce, 1, None),
    "is_null": (_is_null, 1, 1),
}
#: The functions an expression may call.
FUNCTION_NAMES: frozenset[str] = frozenset(FUNCTIONS)
#: The same, as an error message lists them.
FUNCTION_LIST = ", ".join(sorted(FUNCTIONS))
# Functions whose result is never a str/list/tuple (for the `*` and `%` checks).
NUMERIC_FUNCTIONS = frozenset(
    {"abs", "round", "len", "int", "float", "bool", "floor", "ceil", "is_null",
     "startswith", "endswith", "contains"})


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Number)


def _mul(a: Any, b: Any) -> Any:
    """`a * b` for numbers only: sequence repetition could allocate without bound."""
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):  # the hot path
        return a * b
    if _is_number(a) and _is_number(b):  # Decimal, Fraction, numpy scalars, bool
        return a * b
    raise TypeError(f"'*' needs numbers, got {ta.__name__!r} and {tb.__name__!r} "
                    "(sequence repetition is not supported)")


def _mod(a: Any, b: Any) -> Any:
    """`a % b` for numbers only: printf formatting of a string could allocate without bound."""
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):  # the hot path
        return a % b
    if _is_number(a) and _is_number(b):
        return a % b
    raise TypeError(f"'%' needs numbers, got {ta.__name__!r} and {tb.__name__!r} "
                    "(string formatting is not supported)")


def restricted_globals() -> dict[str, Any]:
    """The globals of compiled expression code: the functions and the checked operators."""
    # Empty builtins: the compiled code can reach only what is listed here.
    g: dict[str, Any] = {"__builtins__": {}, MUL: _mul, MOD: _mod}
    g.update((name, fn) for name, (fn, _, _) in FUNCTIONS.items())
    return g
