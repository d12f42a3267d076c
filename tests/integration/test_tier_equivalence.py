"""One spec, one answer in every tier: `run_local`, the Ray runtime (`Runtime.push`) and the
Spark tier (JSON files in, Parquet out) give the same results for every schema type.

The same JSON lines feed all three (`json.loads` of them for the first two, the file for
Spark): `int`, `float`, `str`, `bool`, `any` holding numbers, text, objects, lists and
null, and the nullable types with missing and null values; a window keyed by an `any`
field, arithmetic and aggregates on `any` numbers. Results compare strictly: 1 and 1.0
differ, and so do 455728 and "455728". A result field the runtime left out is a null
cell in Parquet, so missing and None compare equal.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections import Counter
from typing import Any

import pytest

from cameo_actors import Dataflow, avg, count, max_, sum_
from cameo_actors.testing import run_local
from spark_ingest.events import write_file
from spark_ingest.results import decode_rows, read_results
from spark_ingest.schema import result_columns
from spark_ingest.tier import SparkTier
from tests.integration.conftest import RUN_DIR

pytestmark = pytest.mark.integration
_names = itertools.count()
LATE_OK = 10**7  # Spark reads a batch's files in any order: no event may become late

SCHEMA = {"ts": "int", "i": "int", "f": "float", "s": "str", "b": "bool", "a": "any",
          "ni": "int?", "nf": "float?", "ns": "str?", "nb": "bool?", "na": "any?"}
BASE = {"i": 1, "f": 0.5, "s": "a", "b": True}
#: JSON lines as a user's files hold them (some numbers written as Python never would).
ROWS = [
    json.dumps({"ts": 1, **BASE, "a": 455728, "ni": 3, "nf": 1.5, "ns": "x", "nb": False,
                "na": {"k": [1, 2]}}),
    json.dumps({"ts": 2, "i": -2, "f": 2.0, "s": "455728", "b": False, "a": "455728",
                "ni": None, "nf": None, "ns": None, "nb": None, "na": None}),
    json.dumps({"ts": 3, "i": 2**61, "f": -1e300, "s": "", "b": True,
                "a": {"x": {"y": [1, "2", None]}, "z": 2.5, "b": True}}),  # nullables missing
    json.dumps({"ts": 4, "i": 0, "f": 1e-9, "s": "ü😀\"'", "b": False,
                "a": [{"p": 1}, {"p": 2.25}, []], "na": "text"}),
    json.dumps({"ts": 5, **BASE, "a": None, "na": [None]}),
    json.dumps({"ts": 6, **BASE, "f": 3, "nf": 4}),                     # `a` missing; ints as floats
    json.dumps({"ts": 7, **BASE, "a": 1.0, "nf": 7.0, "na": 0}),
    '{"ts": 8, "i": 1, "f": 0.5, "s": "a", "b": true, "a": 2.50, "na": 1e2}',
    '{"ts": 9, "i": 1, "f": 0.5, "s": "a", "b": true, "a": {"k": 1, "k": 2}, "na": {}}',
    json.dumps({"ts": 10, **BASE, "a": True, "ni": -(2**63), "na": False}),
    json.dumps({"ts": 11, **BASE, "a": -0.25, "na": 123456789012345678}),
    # malformed: a null and a missing value in fields without "?", a string for an int
    json.dumps({"ts": 12, **BASE, "i": None}),
    json.dumps({"ts": 13, "i": 1, "f": 0.5, "b": True}),
    json.dumps({"ts": 14, **BASE, "i": "7"}),
]
#: Bids as in the user's report: `any` prices, arithmetic and a window keyed by an `any` field.
BIDS = [json.dumps({"ts": t, "auction": 1000 + t % 3, "price": 455728 + 7 * t if t % 4 else 99.5 + t,
                    **({"bidder": f"b{t % 2}"} if t % 5 else {})})
        for t in range(24)]
BIDS_SCHEMA = {"ts": "int", "auction": "any", "price": "any", "bidder": "str?"}


def build(name: str, data: str, out: str) -> Dataflow:
    d = Dataflow(name, latency_target_ms=1000)
    rows = d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=LATE_OK,
                    connector={"format": "json", "path": f"{data}/rows"})
    bids = d.source("bids", schema=BIDS_SCHEMA, event_time="ts", allowed_lateness_ms=LATE_OK,
                    connector={"format": "json", "path": f"{data}/bids"})

    def to(sink: str) -> dict[str, Any]:
        return {"format": "parquet", "path": f"{out}/{sink}"}

    rows.sink("all", connector=to("all"))
    (rows.filter("i >= 0 and not is_null(a)")
     .map({"ts": "ts", "i2": "i * 2", "f3": "round(f * 3, 6)", "s": "upper(s)", "nb": "nb",
           "ni": "coalesce(ni, -1)", "nf": "nf", "a": "a", "na": "coalesce(na, 'none')"})
     .sink("calc", connector=to("calc")))
    (bids.map({"ts": "ts", "auction": "auction", "euro": "round(price * 0.908, 6)",
               "bidder": "bidder"})
     .sink("euro", connector=to("euro")))
    (bids.key_by("auction").window(tumbling_ms=10)
     .aggregate(n=count(), hi=max_("price"), total=sum_("price"), mean=avg("price"))
     .sink("by_auction", connector=to("by_auction")))
    (bids.key_by("bidder").window(tumbling_ms=100).aggregate(n=count())
     .sink("by_bidder", connector=to("by_bidder")))
    return d


def strict(v: Any) -> Any:
    """A value with its type: 1, 1.0, True and "1" all differ; floats to 12 digits (sums
    may add in another order)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", float(f"{v:.12g}"))
    if isinstance(v, str):
        return ("str", v)
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, strict(x)) for k, x in v.items())))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(strict(x) for x in v))
    raise TypeError(f"unexpected {type(v).__name__} {v!r}")


def canon(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    assert all(set(r) <= set(columns) for r in rows), (rows[:3], columns)
    return sorted(repr(tuple((c, strict(r.get(c))) for c in columns)) for r in rows)


def folder(*parts: str) -> str:
    path = os.path.join(RUN_DIR, "spark-tests", *parts)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def test_every_schema_type_gives_one_answer_in_every_tier(pools: Any, spark: Any) -> None:
    rt = pools["cameo2"]
    base = f"tiers-{next(_names)}"
    data, out = folder("data", base), folder("out", base)
    for sub, lines in (("rows", ROWS), ("bids", BIDS)):
        os.makedirs(f"{data}/{sub}")
        write_file(f"{data}/{sub}", "part-0.json", lines)
    inputs = {"s": [json.loads(line) for line in ROWS], "bids": [json.loads(line) for line in BIDS]}
    sinks = ["all", "calc", "euro", "by_auction", "by_bidder"]

    local = run_local(build(f"{base}-local", data, out), inputs)
    spec = build(base, data, out).spec
    columns = {sink: [c for c, _ in result_columns(spec, [sink])] for sink in sinks}
    expected = {sink: canon(local.sinks[sink], columns[sink]) for sink in sinks}
    expected_errors = {f"{step}:{kind}": n for (step, kind), n in
                       Counter((e.step, e.kind) for e in local.errors).items()}
    # three refused by the source; `a` missing fails is_null(a) in the filter
    assert expected_errors == {"s:malformed": 3, "filter_1:malformed": 1}
    assert all(expected.values()), "a sink of the reference got nothing: the test data is off"

    ray_name = rt.deploy(build(f"{base}-ray", data, out))
    tier = SparkTier(rt, spark)
    try:
        for source, events in inputs.items():
            rt.push(ray_name, source, events)
        rt.close(ray_name)
        tier.deploy(build(f"{base}-spark", data, out))
        rt.wait_idle()
        for sink in sinks:
            assert canon(rt.results(ray_name, sink), columns[sink]) == expected[sink], f"Ray {sink}"
        assert rt.stats(ray_name)["errors"] == expected_errors

        tier.drain(f"{base}-spark", close=True)
        for sink in sinks:
            got = read_results(f"{out}/{sink}")
            assert canon(got, columns[sink]) == expected[sink], f"Spark {sink}"
            read_by_spark = decode_rows(spark.read.parquet(f"{out}/{sink}"))
            assert canon(read_by_spark, columns[sink]) == expected[sink], f"spark.read {sink}"
        assert rt.stats(f"{base}-spark")["errors"] == expected_errors
    finally:
        tier.stop_all()
        for name in (ray_name, f"{base}-spark"):
            rt.cancel(name)

    # What a reader of the Parquet sees: typed columns, JSON text where the type is `any`.
    import pyarrow.parquet as pq

    schema = pq.read_schema(next(f for f in (os.path.join(f"{out}/all", n)
                                             for n in os.listdir(f"{out}/all"))
                                 if f.endswith(".parquet")))
    kinds = {f.name: str(f.type) for f in schema}
    assert (kinds["i"], kinds["f"], kinds["s"], kinds["b"], kinds["a"], kinds["ni"]) == \
        ("int64", "double", "string", "bool", "string", "int64")
    by_ts = {r["ts"]: r for r in read_results(f"{out}/all")}
    assert by_ts[1]["a"] == 455728 and by_ts[2]["a"] == "455728" and by_ts[5]["a"] is None
    assert by_ts[9]["a"] == {"k": 2} and by_ts[8]["a"] == 2.5 and by_ts[2]["ni"] is None
