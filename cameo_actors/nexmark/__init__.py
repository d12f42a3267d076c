"""Nexmark, the benchmark stream processors are judged by, as a kit for cameo.

- `generator`: a seeded generator of the person / auction / bid stream (the reference
  Nexmark generator's proportions and distributions), with bounded disorder and
  deliberately late events;
- `queries`: Q0-Q8 and Q11 as dataflows (`QUERIES`), and their JSON specs in `specs/`
  (`python -m cameo_actors.nexmark` writes them);
- `functions`: the user functions the queries name by import path;
- `reference`: the queries' independent reference, DuckDB SQL over the same stream, and
  the comparison of result multisets (DuckDB is an optional extra, `[nexmark]`).

A definition-level package: it never imports Ray or Spark. The benchmark is
`bench.nexmark`.

>>> from cameo_actors.nexmark import QUERIES, generate
>>> sorted(QUERIES, key=lambda q: int(q[1:]))[:3], generate(events=50).counts()["bid"]
(['q0', 'q1', 'q2'], 46)
"""

from cameo_actors.nexmark.generator import (
    SCHEMA,
    NexmarkConfig,
    NexmarkStream,
    generate,
)
from cameo_actors.nexmark.queries import QUERIES, SINK, SOURCE

__all__ = ["QUERIES", "SCHEMA", "SINK", "SOURCE", "NexmarkConfig", "NexmarkStream", "generate"]
