"""The user-facing errors: one base shape, their exact messages, and pickling (Ray, Spark)."""

from __future__ import annotations

import pickle

import pytest

from cameo_actors.dataflow.expressions import parse_expression
from cameo_actors.errors import CameoError, SpecError, UserError
from cameo_actors.service.errors import ConfigError
from spark_ingest.exceptions import CameoSparkError, OptionError

# (error, its message word for word, the attribute naming its subject)
CASES = [
    (UserError("thing", "a b", 3, "give a b"), "thing: expected a b, got 3. Fix: give a b", None),
    (SpecError("w", "size_ms > 0", 0, "use 1000"),
     "step 'w': expected size_ms > 0, got 0. Fix: use 1000", "step"),
    (SpecError(None, "a JSON object", "invalid JSON (x)", "send the spec as valid JSON"),
     "dataflow: expected a JSON object, got 'invalid JSON (x)'. Fix: send the spec as valid JSON",
     "step"),
    (ConfigError("port", "0..65535", 70000, "pick a free TCP port"),
     "port: expected 0..65535, got 70000. Fix: pick a free TCP port", "option"),
    (OptionError("dataflow", "the name of a running dataflow", None,
                 'add .option("dataflow", "<name>")'),
     "cameo option 'dataflow': expected the name of a running dataflow, got None. "
     'Fix: add .option("dataflow", "<name>")', "option"),
]


@pytest.mark.parametrize(("err", "message", "name"), CASES,
                         ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None)
def test_message_and_pickling(err: UserError, message: str, name: str | None) -> None:
    assert str(err) == message
    assert isinstance(err, UserError) and isinstance(err, CameoError) and isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == message and back.args == err.args
    parts = ("subject", "expected", "got", "fix") + ((name,) if name else ())
    assert {p: getattr(back, p) for p in parts} == {p: getattr(err, p) for p in parts}


def test_subjects_keep_their_names() -> None:
    assert SpecError("w", "e", 1, "f").step == "w" and SpecError(None, "e", 1, "f").step is None
    assert ConfigError("port", "e", 1, "f").option == "port"
    assert OptionError("sink", "e", 1, "f").option == "sink"
    assert isinstance(OptionError("sink", "e", 1, "f"), CameoSparkError)


def test_an_expression_error_pickles_with_its_position() -> None:
    # Its `got` is a str subclass whose repr is itself ("'open' at column 0").
    with pytest.raises(SpecError) as e:
        parse_expression("open('x')", "f1")
    back = pickle.loads(pickle.dumps(e.value))
    assert str(back) == str(e.value) and back.step == "f1" and "at column 0" in str(back)
