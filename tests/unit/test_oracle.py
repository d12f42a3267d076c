"""The zoo's dataflows in-process equal an independent oracle: the same events in DuckDB
SQL (`tests/shared/oracle.py`), which shares no code with the operators."""

from __future__ import annotations

import pytest

from cameo_actors.testing import run_local
from tests.shared.oracle import zoo_expected
from tests.shared.zoo import canon, events, flows


@pytest.mark.parametrize("seed,p", [(1, 1), (2, 2), (7, 3)])
def test_every_zoo_dataflow_equals_the_sql_oracle(seed: int, p: int) -> None:
    data = events(3000, seed=seed)
    for d in flows("oracle", p):
        want = zoo_expected(d.name, data)
        assert want, f"{d.name}: the oracle found nothing; the test data is off"
        got = run_local(d, {s.id: data for s in d.spec.sources}).sinks["o"]
        assert canon(got) == canon(want), d.name


def test_a_kind_without_an_oracle_says_so() -> None:
    assert zoo_expected("x-unknown", events(10)) is None
