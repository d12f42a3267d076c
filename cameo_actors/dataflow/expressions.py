"""Safe expressions: the filter predicates, projections and keys users write as text.

Specs travel over RPC, so expression text is untrusted. It is never passed to
``eval`` or ``exec``: the text is parsed with ``ast.parse(text, mode="eval")``,
every node is checked against a whitelist and rebuilt (field names become
subscripts on the event), and only that rebuilt tree is compiled, with empty
builtins and the whitelisted functions as its only globals.

The modules: `expression_parser` checks the text and rebuilds its tree,
`expression_builtins` holds what the compiled code may call, this module compiles
the tree into a function of one event (`Expression`, `compile_scalar`), and
`expression_batches` compiles filters and projections over whole batches.

The language
------------
Python expression syntax, restricted to:

* **Literals**: ints, floats, strings, ``True``, ``False``, ``None``, and tuples
  or lists of those (for ``in``): ``level in ("ERROR", "FATAL")``.
* **Fields**: a bare name reads a field of the event: ``level`` is
  ``event["level"]``. Dots read nested fields (``user.country`` is
  ``event["user"]["country"]``), and constant subscripts index into values
  (``tags[0]``, ``tags[-1]``, ``payload["k"]``). A name is a function only
  where it is called, so a field may be called ``max`` or ``len``. Names and
  attributes starting with ``_`` are rejected, and so are subscript keys
  starting with ``__``: a top-level field such as ``_id`` cannot be read by
  name; a nested one can (``doc["_id"]``).
* **Comparisons**: ``== != < <= > >=``, chained (``0 <= x < 10``), ``in`` and
  ``not in``; ``is`` is not supported (use ``is_null(x)``).
* **Logic**: ``and``, ``or``, ``not``; a predicate keeps an event when its
  result is truthy. Conditional: ``"hi" if x > 10 else "lo"``.
* **Arithmetic**: ``+ - * / // %`` and unary ``-``, ``+``. ``**``, shifts and
  bitwise operators are not supported (``2 ** 10 ** 9`` would never finish).
* **Functions**, called by plain name with positional arguments only:
  ``abs, round, min, max, len, int, float, str, bool, floor, ceil``,
  ``lower(s)``, ``upper(s)``, ``strip(s)``, ``startswith(s, prefix)``,
  ``endswith(s, suffix)``, ``contains(s, sub)`` (``sub in s``),
  ``coalesce(a, b, ...)`` (the first that is not None) and ``is_null(x)``.

Everything else is rejected with a `SpecError` naming the step, what was
expected, the offending token with its column, and the fix: method calls
(``s.lower()``; write ``lower(s)``), other functions, keyword arguments,
``*args``, lambdas, comprehensions, ``:=``, f-strings, dict and set literals,
slices, bytes and complex literals. Texts longer than `MAX_TEXT_LENGTH`
characters, with more than `MAX_NODES` syntax nodes or nested deeper than
`MAX_DEPTH` are rejected too (limits of `expression_parser`).

Memory bombs. ``*`` and ``%`` are for numbers only; sequence repetition and
printf formatting are not supported. With a literal operand this is caught
when the spec is parsed (``"a" * 100000000``, ``[0] * n``, ``"%099999999d" % 1``
are SpecErrors). A *field* may hold a string, so unless both sides of ``*``
(the left side of ``%``) can never be a sequence (numeric literals, arithmetic
results, numeric functions such as ``len`` or ``float``), the operator runs
through a checked helper that raises TypeError for non-numbers: ``name * 3`` on
``{"name": "a"}`` sends the event to the error output instead of allocating.
``round(x, n)`` refuses ``|n| > MAX_ROUND_DIGITS``. What remains (``+`` on
strings and lists, ``str``, ``min``/``max`` of a list) costs at most the event's
size times the expression's size.

Examples:
    >>> is_error = parse_expression("level == 'ERROR' and value > 10", "f1")
    >>> is_error({"level": "ERROR", "value": 12}), sorted(is_error.fields)
    (True, ['level', 'value'])
    >>> parse_expression("coalesce(user.name, 'anon')", "m1")({"user": {"name": None}})
    'anon'
    >>> parse_expression("open('x')", "f1")
    Traceback (most recent call last):
    ...
    cameo_actors.errors.SpecError: step 'f1': expected a whitelisted function (abs, bool, ceil, coalesce, contains, endswith, float, floor, int, is_null, len, lower, max, min, round, startswith, str, strip, upper), got 'open' at column 0. Fix: call only the functions listed; other Python functions cannot be called from a spec
"""

from __future__ import annotations

import ast
import copy
import operator
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.dataflow.expression_builtins import restricted_globals
from cameo_actors.dataflow.expression_parser import AST_LOCK, EVENT, FILENAME, check_expression

# Same as cameo_actors.operators.base.Event; not imported so the definition
# layer does not depend on the operators package.
Event = dict[str, Any]


def compile_lambda(body: ast.expr, arg: str, name: str) -> Callable[..., Any]:
    """Compile `lambda <arg>: <body>` from a checked tree, with the restricted globals.

    The lambda's code object is taken from the compiled module and wrapped in a
    function directly, so neither eval nor exec ever runs.
    """
    lam = ast.Lambda(
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=arg)], vararg=None, kwonlyargs=[],
                           kw_defaults=[], kwarg=None, defaults=[]),
        body=body)
    tree = ast.fix_missing_locations(ast.Expression(body=lam))
    with AST_LOCK:
        module = compile(tree, FILENAME, "eval", dont_inherit=True)
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(code, restricted_globals(), name)


@dataclass(frozen=True)
class Expression:
    """A checked expression, callable on one event. Build it with `parse_expression`.

    Attributes:
        text: the expression as the user wrote it.
        fields: the top-level event fields it reads (``a.b`` reads ``a``).
        step: the spec step it belongs to (named in errors).

    Pickles as its text and step and is re-checked when unpickled.

    >>> e = parse_expression("round(price * qty, 2)", "m1")
    >>> e({"price": 1.25, "qty": 3}), sorted(e.fields)
    (3.75, ['price', 'qty'])
    """

    text: str
    fields: frozenset[str]
    step: str = field(compare=False)
    _body: ast.expr = field(repr=False, compare=False)
    _fn: Callable[[Event], Any] = field(repr=False, compare=False)

    @property
    def tree(self) -> ast.expr:
        """The checked syntax tree: fields are subscripts of the event name, `*` between
        values that may be strings is a call of the checked helper."""
        return self._body

    def __call__(self, event: Event) -> Any:
        """Evaluate on one event; raises KeyError, TypeError, ... when the event does not fit."""
        return self._fn(event)

    @property
    def function(self) -> Callable[[Event], Any]:
        """The compiled function itself: what calling the expression runs, without the
        extra call (for loops over many events)."""
        return self._fn

    def __reduce__(self) -> tuple[Any, ...]:
        return (parse_expression, (self.text, self.step))


def parse_expression(text: str, step: str) -> Expression:
    """Check an expression and compile it for single events.

    Args:
        text: the expression (see the module docs for the language).
        step: the spec step it belongs to, named in errors.

    Returns:
        The checked, compiled `Expression`.

    Raises:
        SpecError: the text is not in the language; the message names the step,
            what was expected, the offending token and its column, and the fix.

    >>> parse_expression("0 < value <= 10 and not is_null(user)", "f1")({"value": 3, "user": 1})
    True
    >>> parse_expression("s.lower() == 'x'", "f1")
    Traceback (most recent call last):
    ...
    cameo_actors.errors.SpecError: step 'f1': expected a call of a whitelisted function by plain name, got 's.lower()' at column 0. Fix: write lower(x) instead of x.lower(); methods cannot be called
    """
    return make_expression(text, step, name=f"<cameo {step}>")


def make_expression(text: str, step: str, *, where: str = "", name: str) -> Expression:
    """Check `text` and compile it as the function `name` of one event; `where` follows
    the offending token in errors (" in output field 'x'")."""
    body, fields = check_expression(text, step, where)
    fn = compile_lambda(copy.deepcopy(body), EVENT, name)
    return Expression(text, fields, step, body, fn)


def compile_scalar(text: str, step: str) -> Callable[[Event], Any]:
    """Compile an expression computing one value per event (key_by and the like).

    A plain field name compiles to ``operator.itemgetter(name)`` (the fastest
    lookup CPython has); anything else to a compiled function. Either raises
    KeyError, TypeError, ... on an event that does not fit; the caller decides
    what a bad event means.

    >>> compile_scalar("user_id", "k1")({"user_id": 7})
    7
    >>> compile_scalar("lower(user.country)", "k1")({"user": {"country": "FR"}})
    'fr'
    """
    expression = parse_expression(text, step)
    body = expression._body
    if (isinstance(body, ast.Subscript) and isinstance(body.value, ast.Name)
            and body.value.id == EVENT and isinstance(body.slice, ast.Constant)
            and isinstance(body.slice.value, str)):
        return operator.itemgetter(body.slice.value)
    return expression._fn
