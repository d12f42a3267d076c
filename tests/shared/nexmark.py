"""The Nexmark stream the tests share and the check of a query's rows against DuckDB.

Unit (run_local), integration (Ray) and Spark-tier tests of the Nexmark queries run
the same seeded stream and compare with the same reference; a test of another
execution path only has to produce the rows of a query's sink and call
`assert_matches(query, rows)`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from cameo_actors.nexmark.generator import NexmarkConfig, NexmarkStream, generate
from cameo_actors.nexmark.reference import difference, reference

#: 6,000 events at 30 per second of event time: 200 s, twenty 10 s windows; disorder up to
#: 1 s (the queries allow 2 s) and 1 % of the events held back past 62 s (late).
CONFIG = NexmarkConfig(events=6_000, seed=7, rate_eps=30.0, max_disorder_ms=1_000,
                       late_share=0.01)
#: Events per push or TestingSource batch: 100 events span about 3.3 s of event time, far
#: less than the 50 s a late event's margin tolerates.
BATCH = 100


@cache
def stream() -> NexmarkStream:
    return generate(CONFIG)


@cache
def expected(query: str) -> list[dict[str, Any]]:
    return reference(query, stream())


def assert_matches(query: str, rows: list[dict[str, Any]]) -> None:
    """`rows` (a query's sink, on `stream()`) equal the DuckDB reference as multisets."""
    want = expected(query)
    assert want, f"{query}: the reference produced nothing; the test stream is off"
    diff = difference(rows, want)
    assert not diff, f"{query}: {diff}"
