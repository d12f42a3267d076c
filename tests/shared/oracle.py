"""An independent oracle: the results of the zoo's windowed dataflows (`zoo.flows`),
computed by DuckDB SQL from the events alone, not by cameo's operators.

`run_local` runs the same operators as the executors, so a bug in an operator would be
in both; these queries share no code with them. The zoo's events are at most 29 ms out
of order and its sources allow 40 ms, so no event is late, and every window, session
and join pair the SQL finds must come out. A window's result carries `ts` =
`window_end - 1`, as cameo's windows do.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

#: The zoo's events (`zoo.SCHEMA`) as columns.
COLUMNS = {"ts": pa.int64(), "level": pa.string(), "key": pa.string(), "value": pa.float64(),
           "text": pa.string()}

WINDOWS = """
    SELECT key, ws AS window_start, ws + {size} AS window_end, ws + {size} - 1 AS ts,
           {aggregates}
    FROM (SELECT *, unnest(range({first}, floor(ts / {slide})::BIGINT * {slide} + 1,
                                 {slide})) AS ws FROM events)
    GROUP BY key, ws
"""

ZOO: dict[str, str] = {
    "filter": """SELECT ts, value * 2 AS v FROM events WHERE level = 'ERROR' AND value > 50""",
    "flat": """
        SELECT word AS key, ws AS window_start, ws + 100 AS window_end, ws + 99 AS ts, count(*) AS n
        FROM (SELECT unnest(string_split(text, ' ')) AS word, floor(ts / 100)::BIGINT * 100 AS ws
              FROM events)
        GROUP BY word, ws""",
    "tumbling": WINDOWS.format(
        size=50, slide=50, first="floor(ts / 50)::BIGINT * 50",
        aggregates="count(*) AS n, sum(value) AS total, min(value) AS lo, max(value) AS hi, "
                   "avg(value) AS mean"),
    "sliding": WINDOWS.format(
        size=60, slide=20, first="floor(ts / 20)::BIGINT * 20 - 40",
        aggregates="count(*) AS n, sum(value) AS total"),
    # A session: a key's WARN events each less than 15 ms after the one before.
    "session": """
        SELECT key, min(ts) AS window_start, max(ts) + 15 AS window_end, max(ts) + 14 AS ts,
               count(*) AS n
        FROM (SELECT *, sum(gap) OVER (PARTITION BY key ORDER BY ts
                                       ROWS UNBOUNDED PRECEDING) AS session
              FROM (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY key ORDER BY ts) < 15
                                   THEN 0 ELSE 1 END AS gap
                    FROM events WHERE level = 'WARN'))
        GROUP BY key, session""",
    # Both sources get the same events: those of either filter, counted by level.
    "union": """
        SELECT level AS key, ws AS window_start, ws + 100 AS window_end, ws + 99 AS ts,
               count(*) AS n
        FROM (SELECT level, floor(ts / 100)::BIGINT * 100 AS ws FROM events WHERE value > 80
              UNION ALL
              SELECT level, floor(ts / 100)::BIGINT * 100 AS ws FROM events WHERE value < 0)
        GROUP BY level, ws""",
    "join": """
        SELECT l.key, floor(l.ts / 40)::BIGINT * 40 + 39 AS ts, l.value AS lv, r.value AS rv
        FROM events l JOIN events r
          ON l.key = r.key AND floor(l.ts / 40) = floor(r.ts / 40)
        WHERE l.level = 'ERROR' AND r.level = 'WARN'""",
}


def zoo_expected(name: str, data: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """What the zoo's dataflow `name` (`<prefix>-<kind>`) must produce from `data` (fed to
    every one of its sources), by DuckDB; None for a kind with no oracle here."""
    sql = ZOO.get(name.rsplit("-", 1)[1])
    if sql is None:
        return None
    con = duckdb.connect()
    try:
        con.register("events", pa.table({f: pa.array([e[f] for e in data], type=t)
                                         for f, t in COLUMNS.items()}))
        cursor = con.execute(sql)
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()
