"""Every Nexmark query on a real local Ray equals the DuckDB reference.

The stream is tests/shared/nexmark.py's (6,000 events with disorder and late events),
pushed in batches of 100; the keyed steps run with parallelism 2 on a pool of two
executors, so results cross executors and arrive in any order.

Hook for the Spark tier: a test that runs a query through Spark (the stream written as
files, the results read back) gets the same stream from `tests.shared.nexmark.stream()`
and checks its rows with `assert_matches(query, rows)`.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cameo_actors.nexmark.queries import QUERIES, SINK, SOURCE, STATELESS
from tests.shared.nexmark import BATCH, assert_matches, stream

pytestmark = pytest.mark.integration
#: Batches pushed between two drains (wait_idle). A join's watermark is the lower of its
#: inputs', and on Ray one input's branch may run ahead of the other's by as much as is
#: in flight; draining every 1,000 events (about 33 s of event time) keeps that skew
#: below the 50 s by which a late event is late, so late events are late at a join too,
#: as they are in-process (where nothing runs ahead).
DRAIN_EVERY = 10
_names = itertools.count()


def run_on_ray(rt: Any, query: str, parallelism: int) -> tuple[list[dict[str, Any]],
                                                                dict[str, int]]:
    """(results, error counts) of `query` on the shared stream, pushed in batches."""
    dataflow = QUERIES[query](name=f"nexmark-{query}-{next(_names)}", parallelism=parallelism)
    name = rt.deploy(dataflow)
    try:
        events = stream().events
        for i in range(0, len(events), BATCH):
            rt.push(name, SOURCE, events[i:i + BATCH], batch_size=BATCH)
            if (i // BATCH) % DRAIN_EVERY == DRAIN_EVERY - 1:
                rt.wait_idle(timeout_s=120)
        rt.close(name)
        rt.wait_idle(timeout_s=120)
        return rt.results(name, SINK), rt.stats(name)["errors"]
    finally:
        rt.cancel(name)


@pytest.mark.parametrize("query", list(QUERIES))
def test_query_on_ray_equals_the_reference(pools: Any, query: str) -> None:
    rows, errors = run_on_ray(pools["cameo2"], query, parallelism=2)
    assert_matches(query, rows)
    # Late events are errors of the time-based queries, and nothing else is.
    kinds = {key.rpartition(":")[2] for key in errors}
    assert kinds == (set() if query in STATELESS else {"late"}), errors
