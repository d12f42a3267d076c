"""An independent reference for the Nexmark queries: DuckDB SQL over the same events.

The kit's check, beside it: the tests (tests/unit/test_nexmark.py,
tests/integration/test_nexmark.py), `bench.nexmark` and a user of the kit compare
cameo's results with it. It needs DuckDB (`pip install 'cameo-actors[nexmark]'`), imported
only when a reference is computed. Nothing here runs cameo's operators: the
events go into three DuckDB tables (persons, auctions, bids, each with a ``late`` column
from the generator) and every query is plain SQL with the semantics that
`cameo_actors.nexmark.queries` documents. Late events are left out of every query that
keeps state by event time (q3-q8, q11) and kept by q0-q2.

Results are compared as sorted multisets of canonical JSON rows (`canonical`): keys
sorted, a float that is a whole number written as an int, other floats rounded to 6
decimals.

    >>> from cameo_actors.nexmark.generator import generate
    >>> s = generate(events=200, seed=1)
    >>> len(reference("q0", s)) == s.counts()["bid"]
    True
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa

from cameo_actors.nexmark import queries as q
from cameo_actors.nexmark.generator import NexmarkStream

Row = dict[str, Any]

_TABLES = {
    "persons": ("person", [("id", pa.int64()), ("name", pa.string()), ("city", pa.string()),
                           ("state", pa.string()), ("date_time", pa.int64())]),
    "auctions": ("auction", [("id", pa.int64()), ("seller", pa.int64()),
                             ("category", pa.int64()), ("date_time", pa.int64()),
                             ("expires", pa.int64())]),
    "bids": ("bid", [("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.int64()),
                     ("channel", pa.string()), ("url", pa.string()),
                     ("date_time", pa.int64()), ("extra", pa.string())]),
}


def _sql(query: str) -> str:
    num, den = q.Q1_RATE
    lo, hi = q.Q3_INTERVAL_MS
    states = ", ".join(f"'{s}'" for s in q.Q3_STATES)
    w, slide, gap = q.WINDOW_MS, q.Q5_SLIDE_MS, q.SESSION_GAP_MS
    closings = """
        WITH closings AS (
            SELECT a.id AS auction, a.seller, a.category, a.expires AS date_time,
                   max(b.price) AS price
            FROM auctions a JOIN bids b
              ON b.auction = a.id AND b.date_time BETWEEN a.date_time AND a.expires
            WHERE NOT a.late AND NOT b.late
            GROUP BY a.id, a.seller, a.category, a.expires)"""
    return {
        "q0": "SELECT auction, bidder, price, channel, url, date_time, extra FROM bids",
        "q1": f"""SELECT auction, bidder, (price * {num}) // {den} AS price, date_time, extra
                  FROM bids""",
        "q2": f"SELECT auction, price FROM bids WHERE auction % {q.Q2_MODULUS} = 0",
        "q3": f"""
            SELECT p.name, p.city, p.state, a.id
            FROM persons p JOIN auctions a
              ON a.seller = p.id
             AND a.date_time BETWEEN p.date_time + {lo} AND p.date_time + {hi}
            WHERE NOT p.late AND NOT a.late AND p.state IN ({states})
              AND a.category = {q.Q3_CATEGORY}""",
        "q4": closings + """
            SELECT category, date_time, auction, price,
                   avg(price) OVER (PARTITION BY category ORDER BY date_time, auction
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS avg_price
            FROM closings""",
        "q5": f"""
            WITH windowed AS (
                SELECT b.auction, (b.date_time // {slide}) * {slide} - r.k * {slide} AS window_start
                FROM bids b, range(0, {w // slide}) AS r(k)
                WHERE NOT b.late),
            counted AS (
                SELECT auction, window_start, count(*) AS n FROM windowed
                GROUP BY auction, window_start)
            SELECT auction, n, window_start, window_start + {w} AS window_end FROM counted
            QUALIFY n = max(n) OVER (PARTITION BY window_start)""",
        "q6": closings + f"""
            SELECT seller, date_time, auction, price,
                   avg(price) OVER (PARTITION BY seller ORDER BY date_time, auction
                                    ROWS BETWEEN {q.Q6_LAST - 1} PRECEDING AND CURRENT ROW)
                     AS avg_price
            FROM closings""",
        "q7": f"""
            WITH windowed AS (
                SELECT auction, bidder, price, date_time,
                       (date_time // {w}) * {w} + {w} AS window_end
                FROM bids WHERE NOT late)
            SELECT auction, bidder, price, date_time, window_end FROM windowed
            QUALIFY price = max(price) OVER (PARTITION BY window_end)""",
        "q8": f"""
            SELECT p.id, p.name, a.id AS auction, (p.date_time // {w}) * {w} AS window_start,
                   (p.date_time // {w}) * {w} + {w} AS window_end
            FROM persons p JOIN auctions a
              ON a.seller = p.id AND p.date_time // {w} = a.date_time // {w}
            WHERE NOT p.late AND NOT a.late""",
        "q11": f"""
            WITH marked AS (
                SELECT bidder, date_time,
                       CASE WHEN date_time - lag(date_time) OVER (
                                PARTITION BY bidder ORDER BY date_time) < {gap}
                            THEN 0 ELSE 1 END AS starts
                FROM bids WHERE NOT late),
            numbered AS (
                SELECT bidder, date_time,
                       sum(starts) OVER (PARTITION BY bidder ORDER BY date_time
                                         ROWS UNBOUNDED PRECEDING) AS session
                FROM marked)
            SELECT bidder, count(*) AS n, min(date_time) AS window_start,
                   max(date_time) + {gap} AS window_end
            FROM numbered GROUP BY bidder, session""",
    }[query]


def tables(stream: NexmarkStream) -> dict[str, pa.Table]:
    """The stream's events as three Arrow tables, each with a ``late`` column."""
    rows: dict[str, list[Row]] = {kind: [] for kind, _ in _TABLES.values()}
    for i, e in enumerate(stream.events):
        rows[e["kind"]].append({**e, "late": i in stream.late})
    out = {}
    for table, (kind, columns) in _TABLES.items():
        schema = pa.schema([*columns, ("late", pa.bool_())])
        out[table] = pa.Table.from_pylist(rows[kind], schema=schema)
    return out


def reference(query: str, stream: NexmarkStream) -> list[Row]:
    """The rows `query` ("q0".."q11") must produce on `stream`, computed by DuckDB."""
    try:
        import duckdb
    except ImportError as e:  # an optional extra: the kit's other parts work without it
        raise ImportError("the Nexmark reference needs DuckDB: pip install "
                          "'cameo-actors[nexmark]'") from e

    if query not in q.QUERIES:
        raise ValueError(f"reference: expected a query from {list(q.QUERIES)}, got {query!r}")
    con = duckdb.connect()
    try:
        for name, table in tables(stream).items():
            con.register(name, table)
        cursor = con.execute(_sql(query))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        con.close()


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() else round(value, 6)
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def canonical(rows: list[Row]) -> list[str]:
    """Rows as a sorted list of canonical JSON texts (a multiset, comparable with ==)."""
    return sorted(json.dumps(_norm(r), sort_keys=True) for r in rows)


def difference(got: list[Row], expected: list[Row], show: int = 3) -> str:
    """What differs between two multisets of rows, in a few lines ("" when equal)."""
    a, b = Counter(canonical(got)), Counter(canonical(expected))
    if a == b:
        return ""
    extra, missing = list((a - b).elements()), list((b - a).elements())
    return (f"{len(got)} rows, expected {len(expected)}: {len(missing)} missing "
            f"{missing[:show]}, {len(extra)} unexpected {extra[:show]}")
