"""The checker of expression text: parse, check every node against the whitelist, rebuild.

`check_expression` parses the text with ``ast.parse(text, mode="eval")``, rejects
texts that are too long, too big or nested too deep, walks the tree with `_Checker`
and builds a new one from the allowed nodes only: a field name becomes a subscript
of the event (`EVENT`), a `*` or `%` that may meet a string becomes a call of the
checked helper (`expression_builtins`). Anything else is a `SpecError` naming the
step, what was expected, the offending token with its column, and the fix. The
language itself is described in `expressions`, which compiles the rebuilt tree.
"""

from __future__ import annotations

import ast
import threading
from typing import NoReturn

from cameo_actors.dataflow.expression_builtins import (
    FUNCTION_LIST,
    FUNCTIONS,
    MOD,
    MUL,
    NUMERIC_FUNCTIONS,
)
from cameo_actors.errors import SpecError

#: Longest accepted expression text, in characters.
MAX_TEXT_LENGTH = 4_000
#: Most syntax nodes (as counted by `ast.walk`) in one expression.
MAX_NODES = 2_000
#: Deepest nesting of syntax nodes; keeps the checker and compiler off the recursion limit.
MAX_DEPTH = 100

#: The event's name in the generated code. Users cannot write names starting with "_",
#: so it never collides with a field or a function.
EVENT = "_e"
#: The file name compiled expression code reports.
FILENAME = "<cameo expression>"
#: Converting between Python's AST objects and the compiler's (`ast.parse`, and `compile`
#: of a tree) is not safe from several threads at once in CPython 3.11 (gh-106905: "AST
#: constructor recursion depth mismatch", met in a deploy on the controller); the
#: controller and executors parse and compile specs on several threads.
AST_LOCK = threading.Lock()

_LITERAL_TYPES = (int, float, str, bool, type(None))

_BINARY_OPS: dict[type[ast.operator], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
}
_REJECTED_BINARY_OPS: dict[type[ast.operator], tuple[str, str]] = {
    ast.Pow: ("**", "multiply explicitly (x * x); '**' is not supported because huge exponents "
                    "can exhaust CPU and memory"),
    ast.LShift: ("<<", "use * or //; shifts are not supported"),
    ast.RShift: (">>", "use * or //; shifts are not supported"),
    ast.BitOr: ("|", "use 'or' for logic; bitwise operators are not supported"),
    ast.BitAnd: ("&", "use 'and' for logic; bitwise operators are not supported"),
    ast.BitXor: ("^", "use != between booleans; bitwise operators are not supported"),
    ast.MatMult: ("@", "matrix multiplication is not supported"),
}
_UNARY_OPS = (ast.Not, ast.USub, ast.UAdd)
_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_COMPARE_SYMBOLS = "==, !=, <, <=, >, >=, in, not in"

_EXPECTED_EXPRESSION = ("an expression of fields, literals, comparisons, and/or/not, "
                        "arithmetic (+ - * / // %) and whitelisted functions")
# Constructs rejected as a whole: node type -> (what to call it, the fix).
_REJECTED_NODES: dict[type[ast.AST], tuple[str, str]] = {
    ast.Lambda: ("lambda", "write the expression itself; lambdas are not supported"),
    ast.NamedExpr: ("assignment (:=)", "expressions cannot assign; repeat the sub-expression"),
    ast.ListComp: ("comprehension", "comprehensions are not supported; use a Python function step"),
    ast.SetComp: ("comprehension", "comprehensions are not supported; use a Python function step"),
    ast.DictComp: ("comprehension", "comprehensions are not supported; use a Python function step"),
    ast.GeneratorExp: ("generator", "generators are not supported; use a Python function step"),
    ast.Dict: ("dict literal", "dict literals are not supported; a projection builds the output "
                               "dict from its fields"),
    ast.Set: ("set literal", "use a tuple for membership: x in (1, 2)"),
    ast.JoinedStr: ("f-string", "f-strings are not supported; build strings with str(x) and +"),
    ast.FormattedValue: ("f-string", "f-strings are not supported; build strings with str(x) and +"),
    ast.Starred: ("*-unpacking", "pass arguments one by one; *args is not supported"),
    ast.Slice: ("slice", "slices are not supported; index with a constant: tags[0]"),
    ast.Await: ("await", "await is not supported"),
    ast.Yield: ("yield", "yield is not supported"),
    ast.YieldFrom: ("yield", "yield is not supported"),
}


class Got(str):
    """The 'got' of a SpecError: a str whose repr is itself, so the message reads
    "got 'open' at column 0" rather than quoting the whole phrase again."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def load_name(name: str) -> ast.Name:
    """A name read by the generated code."""
    return ast.Name(id=name, ctx=ast.Load())


def _is_literal(node: ast.expr) -> bool:
    """A constant of an allowed type, or a signed number: the elements a tuple/list may hold."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)
    return isinstance(node, ast.Constant) and type(node.value) in _LITERAL_TYPES


def _never_sequence(node: ast.expr) -> bool:
    """True when `node` evaluates to a number/bool (or raises), never to a str/list/tuple.

    Decides whether `*` and `%` may compile to plain Python operators; unknown
    means False, which only costs the checked helper.
    """
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool)
    if isinstance(node, (ast.UnaryOp, ast.Compare)):
        return True  # -x, +x, not x on a sequence are a number, a bool or a TypeError
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Add):
            # number + sequence raises, so one numeric side makes the sum numeric
            return _never_sequence(node.left) or _never_sequence(node.right)
        return True  # - / // have no sequence meaning; * and % are checked or numeric
    if isinstance(node, ast.BoolOp):
        return all(_never_sequence(v) for v in node.values)
    if isinstance(node, ast.IfExp):
        return _never_sequence(node.body) and _never_sequence(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in NUMERIC_FUNCTIONS:
            return True
        if node.func.id in ("min", "max", "coalesce") and len(node.args) > 1:
            return all(_never_sequence(a) for a in node.args)
    return False


def _attr_position(node: ast.Attribute) -> tuple[int, int]:
    """(line, byte column) of the name after the dot, which the node itself does not record."""
    end_line = node.end_lineno or node.lineno
    end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
    return end_line, max(end_col - len(node.attr.encode("utf-8")), 0)


def _is_field_path(node: ast.expr) -> bool:
    """A name, or a chain of .attr and [constant] on a name: what `a.b` may be applied to."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name)


class _Checker:
    """Walks the user's tree and builds a new, checked one; raises SpecError on anything else."""

    def __init__(self, text: str, step: str, where: str, skipped: str = "") -> None:
        self.text = text  # what was parsed: the user's text without leading whitespace
        self.step = step
        self.where = where  # e.g. " in output field 'x'" for projections
        self.fields: set[str] = set()
        self._lines = text.split("\n")
        # Positions are reported in the user's text, leading whitespace included.
        self._line_shift = skipped.count("\n")
        self._col_shift = len(skipped) - (skipped.rfind("\n") + 1)
        self._multiline = "\n" in (skipped + text).rstrip()

    # -- errors ---------------------------------------------------------------
    def position(self, lineno: int, col: int, *, byte_offset: bool = True) -> str:
        if byte_offset:  # ast columns are UTF-8 byte offsets; report characters
            line = self._lines[lineno - 1] if 0 < lineno <= len(self._lines) else ""
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        if lineno == 1:
            col += self._col_shift
        lineno += self._line_shift
        if self._multiline:
            return f"line {lineno}, column {col}"
        return f"column {col}"

    def segment(self, node: ast.AST) -> str:
        seg = ast.get_source_segment(self.text, node) or type(node).__name__
        return seg if len(seg) <= 60 else seg[:57] + "..."

    def fail(self, node: ast.AST, expected: str, fix: str, what: str | None = None,
             at: tuple[int, int] | None = None) -> NoReturn:
        token = repr(self.segment(node)) if what is None else what
        if at is None:
            at = (getattr(node, "lineno", 1), getattr(node, "col_offset", 0))
        where = self.position(*at)
        raise SpecError(self.step, expected, Got(f"{token} at {where}{self.where}"), fix)

    # -- the walk -------------------------------------------------------------
    def visit(self, node: ast.AST) -> ast.expr:
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.UnaryOp):
            return self.unaryop(node)
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(op=type(node.op)(), values=[self.visit(v) for v in node.values])
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.IfExp):
            return ast.IfExp(test=self.visit(node.test), body=self.visit(node.body),
                             orelse=self.visit(node.orelse))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return self.sequence(node)
        kind, fix = _REJECTED_NODES.get(type(node), (type(node).__name__, "rewrite the expression "
                                                     "using the constructs listed in the docs"))
        self.fail(node, _EXPECTED_EXPRESSION, fix, what=f"{kind} {self.segment(node)!r}")

    def constant(self, node: ast.Constant) -> ast.expr:
        if type(node.value) not in _LITERAL_TYPES:
            self.fail(node, "a number, string, True, False or None literal",
                      "bytes, complex and ... literals are not supported; use a str or a number")
        return ast.Constant(value=node.value)

    def name(self, node: ast.Name) -> ast.expr:
        if node.id.startswith("_"):
            self.fail(node, "a field name that does not start with '_'",
                      "names starting with '_' are reserved; read nested keys as payload['_k'] "
                      "and rename top-level fields upstream")
        self.fields.add(node.id)
        return ast.Subscript(value=load_name(EVENT), slice=ast.Constant(value=node.id), ctx=ast.Load())

    def attribute(self, node: ast.Attribute) -> ast.expr:
        if node.attr.startswith("_"):
            self.fail(node, "a field name that does not start with '_'",
                      "attributes are nested fields (a.b); names starting with '_' are reserved",
                      what=repr(node.attr), at=_attr_position(node))
        if not _is_field_path(node.value):
            self.fail(node, "a nested field such as user.name",
                      "'.' reads a nested field of the event; values have no attributes or methods "
                      "here, use the whitelisted functions instead")
        return ast.Subscript(value=self.visit(node.value), slice=ast.Constant(value=node.attr),
                             ctx=ast.Load())

    def subscript(self, node: ast.Subscript) -> ast.expr:
        key = node.slice
        value: object = None
        if isinstance(key, ast.Constant) and type(key.value) in (int, str):
            value = key.value
        elif (isinstance(key, ast.UnaryOp) and isinstance(key.op, ast.USub)
              and isinstance(key.operand, ast.Constant) and type(key.operand.value) is int):
            value = -key.operand.value
        else:
            self.fail(key, "a constant index or key such as tags[0] or payload['k']",
                      "index with an int or str literal; computed indexes and slices are not "
                      "supported")
        if isinstance(value, str) and value.startswith("__"):
            self.fail(key, "a key that does not start with '__'",
                      "dunder names are reserved; rename the key upstream")
        return ast.Subscript(value=self.visit(node.value), slice=ast.Constant(value=value),
                             ctx=ast.Load())

    def binop(self, node: ast.BinOp) -> ast.expr:
        op = type(node.op)
        if op in _REJECTED_BINARY_OPS:
            symbol, fix = _REJECTED_BINARY_OPS[op]
            self.fail(node, "an arithmetic operator (+ - * / // %)", fix,
                      what=f"{symbol!r} in {self.segment(node)!r}")
        if op not in _BINARY_OPS:
            self.fail(node, "an arithmetic operator (+ - * / // %)", "use + - * / // %")
        left, right = node.left, node.right
        if op is ast.Mult:
            for side in (left, right):
                if ((isinstance(side, ast.Constant) and isinstance(side.value, str))
                        or isinstance(side, (ast.Tuple, ast.List))):
                    self.fail(node, "numbers on both sides of '*'",
                              "sequence repetition is not supported (it can allocate unbounded "
                              "memory); write the string out or build it with +")
        if op is ast.Mod and isinstance(left, ast.Constant) and isinstance(left.value, str):
            self.fail(node, "numbers on both sides of '%'",
                      "printf-style string formatting is not supported; build strings with "
                      "str(x) and +")
        new_left, new_right = self.visit(left), self.visit(right)
        # A field may hold a string: unless both sides are provably non-sequences,
        # route * and % through helpers that refuse non-numbers at run time.
        if op is ast.Mult and not (_never_sequence(left) and _never_sequence(right)):
            return ast.Call(func=load_name(MUL), args=[new_left, new_right], keywords=[])
        if op is ast.Mod and not _never_sequence(left):
            return ast.Call(func=load_name(MOD), args=[new_left, new_right], keywords=[])
        return ast.BinOp(left=new_left, op=op(), right=new_right)

    def unaryop(self, node: ast.UnaryOp) -> ast.expr:
        if not isinstance(node.op, _UNARY_OPS):
            self.fail(node, "a unary operator (not, -, +)",
                      "bitwise inversion (~) is not supported; use -x - 1 or not x")
        return ast.UnaryOp(op=type(node.op)(), operand=self.visit(node.operand))

    def compare(self, node: ast.Compare) -> ast.expr:
        for op in node.ops:
            if not isinstance(op, _COMPARE_OPS):
                symbol = "is not" if isinstance(op, ast.IsNot) else "is"
                self.fail(node, f"a comparison ({_COMPARE_SYMBOLS})",
                          "use is_null(x) or not is_null(x), or == / !=",
                          what=f"{symbol!r} in {self.segment(node)!r}")
        return ast.Compare(left=self.visit(node.left), ops=[type(op)() for op in node.ops],
                           comparators=[self.visit(c) for c in node.comparators])

    def call(self, node: ast.Call) -> ast.expr:
        func = node.func
        if isinstance(func, ast.Attribute):
            name = func.attr
            hint = (f"write {name}(x) instead of x.{name}()" if name in FUNCTIONS
                    else f"call one of: {FUNCTION_LIST}")
            self.fail(node, "a call of a whitelisted function by plain name",
                      f"{hint}; methods cannot be called")
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            self.fail(func, f"a whitelisted function ({FUNCTION_LIST})",
                      "call only the functions listed; other Python functions cannot be called "
                      "from a spec")
        if node.keywords:
            kw = node.keywords[0]
            self.fail(kw, "positional arguments only",
                      f"pass arguments by position, e.g. {func.id}(x, y); keyword arguments are "
                      "not supported")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.visit(arg)  # rejects
        _, least, most = FUNCTIONS[func.id]
        n = len(node.args)
        if n < least or (most is not None and n > most):
            want = (f"{least}" if least == most else
                    f"{least} or more" if most is None else f"{least} to {most}")
            self.fail(node, f"{func.id}() with {want} argument{'s' if want != '1' else ''}",
                      f"pass {want} positional argument{'s' if want != '1' else ''}",
                      what=f"{n} argument{'s' if n != 1 else ''} in {self.segment(node)!r}")
        return ast.Call(func=load_name(func.id), args=[self.visit(a) for a in node.args], keywords=[])

    def sequence(self, node: ast.Tuple | ast.List) -> ast.expr:
        for elt in node.elts:
            if not _is_literal(elt):
                self.fail(elt, "a literal (number, string, True, False, None) inside a "
                               "tuple or list",
                          "tuples and lists hold literals only, e.g. level in ('ERROR', 'FATAL')")
        elts = [self.visit(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return ast.Tuple(elts=elts, ctx=ast.Load())
        return ast.List(elts=elts, ctx=ast.Load())


def _check_size(tree: ast.AST, checker: _Checker) -> None:
    """Reject huge or deeply nested trees before the recursive checker walks them."""
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            checker.fail(tree, f"an expression of at most {MAX_NODES:,} syntax nodes",
                         "split the logic over several steps or use a Python function step",
                         what=f"more than {MAX_NODES:,} nodes")
        if depth > MAX_DEPTH:
            checker.fail(node, f"an expression nested at most {MAX_DEPTH} levels deep",
                         "flatten the expression or use a Python function step",
                         what=f"nesting deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def check_expression(text: object, step: str, where: str = "") -> tuple[ast.expr, frozenset[str]]:
    """Parse and check `text`; returns the rewritten body and the top-level fields it reads.
    `where` follows the offending token in errors (" in output field 'x'")."""
    if not isinstance(text, str):
        raise SpecError(step, "an expression as a string", Got(f"{type(text).__name__} "
                        f"{text!r}"[:80] + where), "write the expression as text, e.g. \"x > 1\"")
    if not text.strip():
        raise SpecError(step, "a non-empty expression", Got(f"{text!r}{where}"),
                        "write an expression, e.g. \"level == 'ERROR'\"")
    if len(text) > MAX_TEXT_LENGTH:
        raise SpecError(step, f"an expression of at most {MAX_TEXT_LENGTH:,} characters",
                        Got(f"{len(text):,} characters{where}"),
                        "shorten it, split it over several steps, or use a Python function step")
    # Leading whitespace (indented YAML) would be an IndentationError; parse without it.
    source = text.lstrip()
    checker = _Checker(source, step, where, skipped=text[:len(text) - len(source)])
    try:
        with AST_LOCK:
            tree = ast.parse(source, filename=FILENAME, mode="eval")
    except SyntaxError as exc:
        msg = (exc.msg or "invalid syntax").rstrip(".")
        if exc.text is None:  # e.g. null bytes: no position to show
            got = f"{msg}{where}"
        else:
            col = max((exc.offset or 1) - 1, 0)
            near = exc.text.rstrip("\n")[col:col + 20]
            at = checker.position(exc.lineno or 1, col, byte_offset=False)
            got = f"{repr(near) if near.strip() else 'end of text'} at {at} ({msg}){where}"
        raise SpecError(step, "an expression in Python syntax", Got(got),
                        "check quotes and parentheses; write == for equality and and/or/not "
                        "for logic, e.g. \"level == 'ERROR' and value > 10\"") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise SpecError(step, "an expression in Python syntax",
                        Got(f"unparsable text ({type(exc).__name__}: {exc}){where}"),
                        "remove null bytes and deep nesting") from None
    _check_size(tree, checker)
    body = checker.visit(tree.body)
    return body, frozenset(checker.fields)
