"""Safe expressions: the language, what it rejects and why, and batch behaviour."""

from __future__ import annotations

import ast
import inspect
import operator
import pickle
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.dataflow import expressions
from cameo_actors.dataflow.expression_batches import compile_filter, compile_projection
from cameo_actors.dataflow.expression_builtins import FUNCTION_NAMES
from cameo_actors.dataflow.expression_parser import MAX_DEPTH, MAX_NODES, MAX_TEXT_LENGTH
from cameo_actors.dataflow.expressions import Expression, compile_scalar, parse_expression
from cameo_actors.errors import SpecError

EVENT: dict[str, Any] = {
    "level": "ERROR",
    "value": 12,
    "ratio": 0.5,
    "name": "  Alice ",
    "missing": None,
    "tags": ["a", "b", "c"],
    "user": {"country": "FR", "age": 41, "_id": 7},
    "payload": {"k": "v", "user-id": 3},
    "max": 99,
}


def rejected(text: str, step: str = "f1") -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_expression(text, step)
    return info.value


# -- semantics ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # literals
        ("1", 1), ("-2.5", -2.5), ("'x'", "x"), ('"x" "y"', "xy"), ("True", True),
        ("None", None), ("(1, 'a')", (1, "a")), ("[1, -2]", [1, -2]), ("()", ()),
        # fields: bare, nested, subscripts, a field named like a function
        ("level", "ERROR"), ("user.country", "FR"), ("user['age']", 41), ("tags[0]", "a"),
        ("tags[-1]", "c"), ("payload['user-id']", 3), ("user['_id']", 7), ("max", 99),
        ("max + 1", 100),
        # comparisons, chained, membership
        ("value == 12", True), ("value != 12", False), ("value < 12", False),
        ("value <= 12", True), ("value > 11", True), ("value >= 13", False),
        ("10 < value < 20", True), ("10 < value < 11", False), ("1 < 2 > 3", False),
        ("level in ('ERROR', 'FATAL')", True), ("level not in ['ERROR']", False),
        ("'b' in tags", True), ("'k' in payload", True),
        # logic returns operands (Python semantics), truthiness is applied by filters
        ("value > 1 and level", "ERROR"), ("missing or 'd'", "d"), ("not missing", True),
        ("not value == 12", False),
        # arithmetic and precedence
        ("value + 1", 13), ("value - 13", -1), ("value * 2", 24), ("value / 8", 1.5),
        ("value // 5", 2), ("value % 5", 2), ("-value", -12), ("+value", 12),
        ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("-value % 5", 3), ("ratio * 4", 2.0),
        ("2 * 3 * 4", 24), ("len(tags) * 2", 6), ("float(value) % 5", 2.0),
        ("level + '!'", "ERROR!"), ("tags + ['d']", ["a", "b", "c", "d"]),
        # conditional
        ("'hi' if value > 10 else 'lo'", "hi"), ("'hi' if value > 20 else 'lo'", "lo"),
        # functions
        ("abs(-value)", 12), ("round(2.567, 2)", 2.57), ("round(ratio)", 0),
        ("min(value, 3, 7)", 3), ("max(tags)", "c"), ("len(name)", 8), ("int('42')", 42),
        ("int('ff', 16)", 255), ("float('1.5')", 1.5), ("str(value)", "12"), ("bool(0)", False),
        ("lower(level)", "error"), ("upper(user.country + 'x')", "FRX"),
        ("strip(name)", "Alice"), ("strip('xxaxx', 'x')", "a"),
        ("startswith(level, 'ERR')", True), ("endswith(level, ('OR', 'AL'))", True),
        ("contains(name, 'lic')", True), ("contains(tags, 'z')", False),
        ("floor(-ratio)", -1), ("ceil(ratio)", 1), ("coalesce(missing, None, 3, 4)", 3),
        ("coalesce(missing)", None), ("is_null(missing)", True), ("is_null(value)", False),
        # whitespace and multi-line text (inside parentheses) are fine
        ("  value > 1  ", True), ("(value > 1\n and level == 'ERROR')", True),
    ],
)
def test_semantics(text: str, expected: Any) -> None:
    result = parse_expression(text, "s1")(EVENT)
    assert result == expected
    assert type(result) is type(expected)


def test_fields_lists_the_top_level_fields_read() -> None:
    e = parse_expression("lower(user.country) == 'fr' and tags[0] in ('a',) and max > len(name)",
                         "f1")
    assert e.fields == frozenset({"user", "tags", "max", "name"})
    assert parse_expression("1 + 2", "f1").fields == frozenset()
    assert e.text.startswith("lower(")
    assert e.step == "f1"


def test_expression_equality_repr_and_pickle() -> None:
    e = parse_expression("value > 1", "f1")
    assert e == parse_expression("value > 1", "other step")
    assert hash(e) == hash(parse_expression("value > 1", "f1"))
    assert "value > 1" in repr(e)
    copy = pickle.loads(pickle.dumps(e))
    assert isinstance(copy, Expression)
    assert copy == e and copy.step == "f1" and copy({"value": 2}) is True


def test_evaluation_errors_are_python_errors() -> None:
    e = parse_expression("value > 1", "f1")
    with pytest.raises(KeyError):
        e({})
    with pytest.raises(TypeError):
        e({"value": "x"})


# -- what is rejected, and what the message says ---------------------------------------------

ALL_FUNCTIONS = ", ".join(sorted(FUNCTION_NAMES))


@pytest.mark.parametrize(
    ("text", "expected", "got", "fix"),
    [
        ("open('x')", f"a whitelisted function ({ALL_FUNCTIONS})", "'open' at column 0",
         "call only the functions listed"),
        ("value > 1 and eval('1')", "a whitelisted function", "'eval' at column 14",
         "call only the functions listed"),
        ("s.lower()", "a call of a whitelisted function by plain name", "'s.lower()' at column 0",
         "write lower(x) instead of x.lower()"),
        ("s.split(',')", "a call of a whitelisted function by plain name",
         "\"s.split(',')\" at column 0", "methods cannot be called"),
        ("round(x, ndigits=2)", "positional arguments only", "'ndigits=2' at column 9",
         "pass arguments by position"),
        ("max(*xs)", "an expression of fields, literals", "*-unpacking '*xs' at column 4",
         "*args is not supported"),
        ("len(a, b)", "len() with 1 argument", "2 arguments in 'len(a, b)' at column 0",
         "pass 1 positional argument"),
        ("coalesce()", "coalesce() with 1 or more arguments", "0 arguments",
         "pass 1 or more positional arguments"),
        ("round(1, 2, 3)", "round() with 1 to 2 arguments", "3 arguments", "pass 1 to 2"),
        ("_secret == 1", "a field name that does not start with '_'", "'_secret' at column 0",
         "names starting with '_' are reserved"),
        ("user._id", "a field name that does not start with '_'", "'_id' at column 5",
         "names starting with '_' are reserved"),
        ("d['__class__']", "a key that does not start with '__'", "\"'__class__'\" at column 2",
         "dunder names are reserved"),
        ("lambda: 1", "an expression of fields, literals", "lambda 'lambda: 1' at column 0",
         "lambdas are not supported"),
        ("(x := 1)", "an expression of fields, literals", "assignment (:=) 'x := 1' at column 1",
         "expressions cannot assign"),
        ("[t for t in tags]", "an expression of fields", "comprehension '[t for t in tags]'",
         "comprehensions are not supported"),
        ("any(t for t in tags)", "a whitelisted function", "'any' at column 0",
         "call only the functions listed"),
        ("len(t for t in tags)", "an expression of fields", "generator",
         "generators are not supported"),
        ("f'{level}'", "an expression of fields", "f-string", "build strings with str(x) and +"),
        ("{'a': 1}", "an expression of fields", "dict literal", "dict literals are not supported"),
        ("level in {'A'}", "an expression of fields", "set literal", "use a tuple for membership"),
        ("tags[0:2]", "a constant index or key", "'0:2' at column 5", "slices are not supported"),
        ("tags[i]", "a constant index or key", "'i' at column 5", "computed indexes"),
        ("2 ** 10", "an arithmetic operator (+ - * / // %)", "'**' in '2 ** 10' at column 0",
         "'**' is not supported"),
        ("x << 3", "an arithmetic operator", "'<<'", "shifts are not supported"),
        ("x & y", "an arithmetic operator", "'&'", "use 'and' for logic"),
        ("x | y", "an arithmetic operator", "'|'", "use 'or' for logic"),
        ("~x", "a unary operator (not, -, +)", "'~x' at column 0", "bitwise inversion"),
        ("x is None", "a comparison (==, !=, <, <=, >, >=, in, not in)",
         "'is' in 'x is None' at column 0", "use is_null(x)"),
        ("x is not None", "a comparison", "'is not'", "use is_null(x)"),
        ("'a' * 100000000", "numbers on both sides of '*'", "\"'a' * 100000000\" at column 0",
         "sequence repetition is not supported"),
        ("3 * [0]", "numbers on both sides of '*'", "'3 * [0]'", "sequence repetition"),
        ("(1,) * n", "numbers on both sides of '*'", "'(1,) * n'", "sequence repetition"),
        ("'%099999999d' % 1", "numbers on both sides of '%'", "at column 0",
         "printf-style string formatting is not supported"),
        ("b'x' == x", "a number, string, True, False or None literal", "\"b'x'\" at column 0",
         "bytes, complex"),
        ("1j", "a number, string, True, False or None literal", "'1j' at column 0", "complex"),
        ("...", "a number, string, True, False or None literal", "'...'", "literals"),
        ("(a, 1)", "a literal (number, string, True, False, None) inside a tuple or list",
         "'a' at column 1", "tuples and lists hold literals only"),
        ("[[1]]", "a literal", "'[1]' at column 1", "hold literals only"),
        ("(a + b).real", "a nested field such as user.name", "'(a + b).real' at column 0",
         "values have no attributes or methods"),
        ("level = 'ERROR'", "an expression in Python syntax", "\"= 'ERROR'\" at column 6",
         "write == for equality"),
        ("a && b", "an expression in Python syntax", "at column", "and/or/not for logic"),
        ("value >", "an expression in Python syntax", "(invalid syntax)", "check quotes"),
        ("'unclosed", "an expression in Python syntax", "unterminated string", "check quotes"),
        ("import os", "an expression in Python syntax", "'import os' at column 0", "check"),
        ("a; b", "an expression in Python syntax", "';", "check"),
        ("(yield)", "an expression of fields", "yield", "yield is not supported"),
        ("", "a non-empty expression", "''", "write an expression"),
        ("   ", "a non-empty expression", "'   '", "write an expression"),
        ("a\0b", "an expression in Python syntax", "null bytes", "check"),
    ],
)
def test_rejections_name_step_expected_got_and_fix(text: str, expected: str, got: str,
                                                   fix: str) -> None:
    err = rejected(text)
    message = str(err)
    assert message.startswith("step 'f1': expected ")
    assert err.step == "f1"
    assert expected in err.expected and f"expected {expected}" in message
    assert got in str(err.got) and f"got {err.got!r}. Fix: " in message
    assert fix in err.fix and f"Fix: {err.fix}" in message


def test_message_reads_like_the_house_style() -> None:
    err = rejected("value > 1 and open('x')", "f7")
    assert str(err) == (
        f"step 'f7': expected a whitelisted function ({ALL_FUNCTIONS}), got 'open' at column 14. "
        "Fix: call only the functions listed; other Python functions cannot be called from a spec")
    assert err.got == "'open' at column 14"  # a plain str, for callers that format their own


def test_columns_count_characters_leading_space_and_lines() -> None:
    assert "'open' at column 5" in str(rejected("ñé + open(1)"))  # characters, not UTF-8 bytes
    assert "'open' at column 3" in str(rejected("   open(1)"))
    assert "'open' at line 2, column 6" in str(rejected("(a +\n      open(1))"))
    assert "at line 3, column 1" in str(rejected("(a\n ==\n )"))


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "__import__('os').system('id')",
        "().__class__",
        "().__class__.__bases__[0].__subclasses__()",
        "[].__class__.__mro__",
        "x.__class__",
        "x.__globals__",
        "open('x')",
        "open('/etc/passwd').read()",
        "eval('1')",
        "exec('1')",
        "getattr(x, 'y')",
        "globals()",
        "vars()",
        "lambda: 1",
        "(lambda: 1)()",
        "(x := 1)",
        "s.lower()",
        "'{0.__class__}'.format(x)",
        "'a' * 100000000",
        "100000000 * 'a'",
        "('a',) * 100000000",
        "'a' * 10 ** 9",
        "2 ** 2 ** 64",
        "1 << 10000000",
        "round(1, -10 ** 9)",
        "str.lower(x)",
        "len.__self__",
        "abs.__self__.open('x')",
        "_e",
        "_batch",
        "_mul(1, 2)",
        "__builtins__",
        "f'{x.__class__}'",
        "[x for x in ().__class__.__bases__]",
        "x[0].__class__",
        "x['__globals__']",
    ],
)
def test_escape_attempts_are_rejected_at_parse_time(text: str) -> None:
    err = rejected(text, "evil")
    assert str(err).startswith("step 'evil': expected ")
    assert " got " in str(err) and ". Fix: " in str(err)
    with pytest.raises(SpecError):
        compile_filter(text, "evil")


def test_compiled_code_has_empty_builtins_and_only_whitelisted_globals() -> None:
    fn = compile_scalar("lower(level) + str(value * 2)", "k1")
    assert fn({"level": "A", "value": 2}) == "a4"
    g = fn.__globals__  # type: ignore[attr-defined]
    assert g["__builtins__"] == {}
    assert set(g) == {"__builtins__", "_mul", "_mod", *FUNCTION_NAMES}


def test_the_module_never_calls_eval_or_exec() -> None:
    tree = ast.parse(inspect.getsource(expressions))
    called = {n.func.id for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {"eval", "exec", "__import__"}


def test_size_limits() -> None:
    err = rejected("x" * (MAX_TEXT_LENGTH + 1))
    assert f"expected an expression of at most {MAX_TEXT_LENGTH:,} characters" in str(err)
    assert f"got {MAX_TEXT_LENGTH + 1:,} characters" in str(err)
    deep = "+".join(["a"] * (MAX_DEPTH + 5))
    assert f"nested at most {MAX_DEPTH} levels deep" in str(rejected(deep))
    wide = "min(" + ",".join(["a"] * (MAX_NODES // 2 + 10)) + ")"  # 2 nodes per 'a'
    assert len(wide) <= MAX_TEXT_LENGTH
    assert f"at most {MAX_NODES:,} syntax nodes" in str(rejected(wide))
    # absurd nesting that the parser itself refuses is still a SpecError
    assert "expected an expression in Python syntax" in str(rejected("-" * 3000 + "1"))
    assert "expected an expression in Python syntax" in str(rejected("(" * 300 + "1" + ")" * 300))


def test_non_string_text_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"step 'f1': expected an expression as a string, got int"):
        parse_expression(42, "f1")  # type: ignore[arg-type]


# -- run-time guards against memory and CPU bombs ------------------------------------------------


def test_star_and_percent_are_numeric_only_at_run_time() -> None:
    f = compile_filter("name * 3 == 9", "f1")
    kept, bad = f([{"name": 3}, {"name": "a"}, {"name": [1]}, {"name": Decimal(3)}])
    assert kept == [{"name": 3}, {"name": Decimal(3)}]
    assert [e for e, _ in bad] == [{"name": "a"}, {"name": [1]}]
    assert bad[0][1] == ("'*' needs numbers, got 'str' and 'int' "
                         "(sequence repetition is not supported)")
    kept, bad = compile_filter("fmt % 2 == 1", "f1")([{"fmt": 3}, {"fmt": "%0999999999d"}])
    assert kept == [{"fmt": 3}]
    assert "string formatting is not supported" in bad[0][1]
    # Both sides provably numeric: plain Python arithmetic, bools included
    assert parse_expression("len(s) * 2 + True * 3", "m")({"s": "ab"}) == 7


def test_round_refuses_huge_ndigits() -> None:
    kept, bad = compile_filter("round(x, -1000000000) == 0", "f1")([{"x": 1}])
    assert kept == [] and "ndigits must be within" in bad[0][1]
    assert parse_expression("round(x, -2)", "m")({"x": 1234}) == 1200


# -- compile_filter ---------------------------------------------------------------------------------


def test_filter_keeps_truthy_events_in_order() -> None:
    f = compile_filter("level == 'ERROR' and value > 10", "f1")
    batch = [{"level": "ERROR", "value": i} for i in range(8, 14)]
    kept, bad = f(batch)
    assert kept == batch[3:] and all(a is b for a, b in zip(kept, batch[3:], strict=True))
    assert bad == []
    assert f([]) == ([], [])
    assert compile_filter("tags", "f1")([{"tags": []}, {"tags": [1]}]) == ([{"tags": [1]}], [])


def test_filter_sends_malformed_events_to_bad_and_keeps_good_ones_in_order() -> None:
    f = compile_filter("level == 'ERROR' and value > 10", "f1")
    batch: list[Any] = [
        {"level": "ERROR", "value": 11},
        {"value": 50},                          # missing field
        {"level": "ERROR", "value": 12},
        {"level": "ERROR", "value": "x"},        # wrong type
        {"level": "INFO", "value": "x"},         # short-circuit: never compares value
        "not a dict",
        None,
        {"level": "ERROR", "value": 13},
    ]
    kept, bad = f(batch)
    assert kept == [batch[0], batch[2], batch[7]]
    assert bad == [
        ({"value": 50}, "field 'level' is missing"),
        ({"level": "ERROR", "value": "x"}, "'>' not supported between 'str' and 'int'"),
        ("not a dict", "event is a str, not a dict"),
        (None, "event is a NoneType, not a dict"),
    ]


def test_filter_reasons_for_other_failures() -> None:
    kept, bad = compile_filter("tags[3] == 'x' or 1 // z", "f1")(
        [{"tags": [1]}, {"tags": [1, 2, 3, "x"]}, {"tags": [1, 2, 3, 4], "z": 0}])
    assert kept == [{"tags": [1, 2, 3, "x"]}]
    assert bad[0][1] == "index out of range (list index out of range)"
    assert bad[1][1] == "ZeroDivisionError: integer division or modulo by zero"
    _, bad = compile_filter("user.country == 'FR'", "f1")([{"user": 3}])
    assert bad[0][1] == "'int' object is not subscriptable"


def test_filter_accepts_any_iterable_and_pickles() -> None:
    f = compile_filter("value > 1", "f1")
    events = iter([{"value": 2}, {"v": 0}])  # the fallback must not find it exhausted
    assert f(events) == ([{"value": 2}], [({"v": 0}, "field 'value' is missing")])  # type: ignore[arg-type]
    g = pickle.loads(pickle.dumps(f))
    assert g([{"value": 2}, {"value": 0}]) == ([{"value": 2}], [])
    assert repr(g) == "compile_filter('value > 1', 'f1')"


def test_filter_rejects_bad_text_at_compile_time() -> None:
    with pytest.raises(SpecError, match=r"step 'f9': expected .* got 'open' at column 0"):
        compile_filter("open('x')", "f9")


# -- compile_projection -------------------------------------------------------------------------------


def test_projection_builds_new_dicts_in_field_order() -> None:
    p = compile_projection({"lvl": "lower(level)", "v2": "value * 2", "country": "user.country"},
                           "m1")
    batch = [{"level": "ERROR", "value": 2, "user": {"country": "FR"}, "extra": 1},
             {"level": "INFO", "value": 3.5, "user": {"country": "DE"}}]
    before = [dict(e) for e in batch]
    out, bad = p(batch)
    assert out == [{"lvl": "error", "v2": 4, "country": "FR"},
                   {"lvl": "info", "v2": 7.0, "country": "DE"}]
    assert [list(row) for row in out] == [["lvl", "v2", "country"]] * 2
    assert bad == [] and batch == before
    assert all(row is not e for row, e in zip(out, batch, strict=True))


def test_projection_reports_bad_events_naming_the_output_field() -> None:
    p = compile_projection({"lvl": "level", "v2": "value + 1"}, "m1")
    batch: list[Any] = [{"level": "A", "value": 1}, {"level": "B"}, {"level": "C", "value": "x"},
                        [1, 2], {"level": "D", "value": 4}]
    out, bad = p(batch)
    assert out == [{"lvl": "A", "v2": 2}, {"lvl": "D", "v2": 5}]
    assert bad == [
        ({"level": "B"}, "field 'value' is missing (output field 'v2')"),
        ({"level": "C", "value": "x"}, 'can only concatenate str (not "int") to str '
                                       "(output field 'v2')"),
        ([1, 2], "event is a list, not a dict (output field 'lvl')"),
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "step 'm1': expected at least one output field, got no fields"),
        ({"": "a"}, "step 'm1': expected output field names as non-empty strings, got ''"),
        ({"  ": "a"}, "expected output field names as non-empty strings"),
        ({3: "a"}, "expected output field names as non-empty strings, got 3"),
        ({"x": 3}, "expected an expression as a string, got int 3 in output field 'x'"),
        ({"ok": "a", "x": "open(1)"}, "got 'open' at column 0 in output field 'x'"),
        ({"x": "a ="}, "in output field 'x'"),
        ([("x", "a")], "expected a mapping of output name -> expression, got list"),
    ],
)
def test_projection_spec_errors(fields: Any, message: str) -> None:
    with pytest.raises(SpecError) as info:
        compile_projection(fields, "m1")
    assert message in str(info.value)
    assert info.value.step == "m1"


def test_projection_pickles() -> None:
    p = pickle.loads(pickle.dumps(compile_projection({"a": "x + 1"}, "m1")))
    assert p([{"x": 1}]) == ([{"a": 2}], [])
    assert repr(p) == "compile_projection({'a': 'x + 1'}, 'm1')"


# -- compile_scalar -------------------------------------------------------------------------------------


def test_scalar_plain_field_is_an_itemgetter() -> None:
    key = compile_scalar("user_id", "k1")
    assert isinstance(key, operator.itemgetter)
    assert key({"user_id": 7}) == 7
    assert isinstance(compile_scalar("  user_id ", "k1"), operator.itemgetter)
    with pytest.raises(KeyError):
        key({})


def test_scalar_expressions() -> None:
    assert compile_scalar("user.country", "k1")({"user": {"country": "FR"}}) == "FR"
    assert compile_scalar("value // 10", "k1")({"value": 42}) == 4
    assert compile_scalar("'const'", "k1")({}) == "const"
    with pytest.raises(SpecError, match="step 'k1'"):
        compile_scalar("x.y()", "k1")


# -- property: compile_filter agrees with a hand-written reference interpreter ----------------------------

FIELDS = ("a", "b", "c")
ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
         "%": operator.mod}
COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge}

Node = tuple[Any, ...]

leaves = st.one_of(
    st.integers(-20, 20).map(lambda n: ("lit", n)),
    st.sampled_from(FIELDS).map(lambda f: ("field", f)),
)
arith = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.tuples(st.just("bin"), st.sampled_from(sorted(ARITH)), kids, kids),
        st.tuples(st.just("neg"), kids),
    ),
    max_leaves=6,
)
comparisons = st.builds(
    lambda first, rest: ("cmp", first, tuple(rest)),
    arith,
    st.lists(st.tuples(st.sampled_from(sorted(COMPARE)), arith), min_size=1, max_size=3),
)
predicates = st.recursive(
    st.one_of(comparisons, arith),
    lambda kids: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), kids, kids),
        st.tuples(st.just("not"), kids),
        st.tuples(st.just("if"), kids, kids, kids),
    ),
    max_leaves=4,
)
events = st.fixed_dictionaries({}, optional={f: st.integers(-30, 30) for f in FIELDS})


def render(node: Node) -> str:
    """Text for a tree, fully parenthesised so precedence never decides the meaning."""
    kind = node[0]
    if kind == "lit":
        return f"({node[1]})"
    if kind == "field":
        return str(node[1])
    if kind == "bin":
        return f"({render(node[2])} {node[1]} {render(node[3])})"
    if kind == "neg":
        return f"(-{render(node[1])})"
    if kind == "cmp":
        return "(" + render(node[1]) + "".join(f" {op} {render(x)}" for op, x in node[2]) + ")"
    if kind in ("and", "or"):
        return f"({render(node[1])} {kind} {render(node[2])})"
    if kind == "not":
        return f"(not {render(node[1])})"
    return f"({render(node[2])} if {render(node[1])} else {render(node[3])})"


def reference(node: Node, event: dict[str, int]) -> Any:
    """A tiny interpreter of the same trees: Python semantics, short-circuits included."""
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "field":
        return event[node[1]]
    if kind == "bin":
        return ARITH[node[1]](reference(node[2], event), reference(node[3], event))
    if kind == "neg":
        return -reference(node[1], event)
    if kind == "cmp":
        left = reference(node[1], event)
        for op, operand in node[2]:
            right = reference(operand, event)
            if not COMPARE[op](left, right):
                return False
            left = right
        return True
    if kind == "and":
        first = reference(node[1], event)
        return reference(node[2], event) if first else first
    if kind == "or":
        first = reference(node[1], event)
        return first if first else reference(node[2], event)
    if kind == "not":
        return not reference(node[1], event)
    return reference(node[2], event) if reference(node[1], event) else reference(node[3], event)


@settings(max_examples=300, deadline=None)
@given(predicates, st.lists(events, max_size=8))
def test_filter_matches_reference_interpreter(tree: Node, batch: list[dict[str, int]]) -> None:
    text = render(tree)
    want_kept, want_bad = [], []
    for event in batch:
        try:
            if reference(tree, event):
                want_kept.append(event)
        except (KeyError, ZeroDivisionError) as exc:
            want_bad.append((event, type(exc)))
    kept, bad = compile_filter(text, "p1")(batch)
    assert kept == want_kept, text
    assert [e for e, _ in bad] == [e for e, _ in want_bad], text
    for (_, message), (_, kind) in zip(bad, want_bad, strict=True):
        assert ("is missing" in message) == (kind is KeyError), (text, message)


@settings(max_examples=200, deadline=None)
@given(arith, arith, st.lists(events, max_size=6))
def test_projection_matches_reference_interpreter(x: Node, y: Node,
                                                  batch: list[dict[str, int]]) -> None:
    want_out, want_bad = [], []
    for event in batch:
        try:
            want_out.append({"x": reference(x, event), "y": reference(y, event)})
        except (KeyError, ZeroDivisionError):
            want_bad.append(event)
    out, bad = compile_projection({"x": render(x), "y": render(y)}, "p1")(batch)
    assert out == want_out
    assert [e for e, _ in bad] == want_bad
