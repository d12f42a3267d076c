"""The Ray runtime against the in-process reference (and the windows, sessions and joins
against an independent one, DuckDB: `tests/shared/oracle.py`), and multi-tenant behaviour."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pyarrow as pa
import pytest

from cameo_actors import Dataflow, SpecError, count
from cameo_actors.operators.exceptions import ColumnsRefused, ResultsNotColumnar
from cameo_actors.testing import run_local
from tests.shared.oracle import zoo_expected
from tests.shared.zoo import SCHEMA, canon, events, flows

pytestmark = pytest.mark.integration
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def run_on(rt: Any, d: Dataflow, data: list[dict[str, Any]], batch: int = 300,
           columns: bool = False) -> list[dict[str, Any]]:
    """`data` through `d` on `rt`, pushed as rows or as Arrow tables."""
    name = rt.deploy(d)
    try:
        for i in range(0, len(data), batch):
            part: Any = pa.Table.from_pylist(data[i:i + batch]) if columns else data[i:i + batch]
            for source in (s.id for s in d.spec.sources):
                rt.push(name, source, part, batch_size=batch)
        rt.close(name)
        rt.wait_idle()
        if columns:  # read as columns too: the same rows, or refused as not columnar
            with contextlib.suppress(ResultsNotColumnar):  # another handle: its own offsets
                whole = rt.handle().result_table(name, commit=False)
                assert whole.num_rows == sum(e - s for s, e in rt.result_offsets(name).values())
            for aid, (start, end) in rt.result_offsets(name).items():
                rows = [e for e, _, _ in rt.read_results(name, aid, start, end)]
                try:
                    table = rt.read_result_columns(name, aid, start, end)
                except ResultsNotColumnar:
                    continue
                assert table.num_rows == len(rows), name
                # A field some rows lack reads as null in their columns: drop those nulls.
                got = [{k: v for k, v in r.items() if k not in ("_ingest_ms", "_egress_ms")
                        and (v is not None or k in e)}
                       for r, e in zip(table.to_pylist(), rows, strict=True)]
                assert canon(got) == canon(rows), name
        return rt.results(name)
    finally:
        rt.cancel(name)


def test_a_reader_waiting_for_results_is_answered_as_they_become_readable(pools: Any) -> None:
    """`await_results` (the Spark reader's planning): with nothing new it answers when its
    wait ends, with what there is; rows pushed then are answered for once readable (after
    their checkpoint)."""
    rt = pools["cameo2"]
    d = (Dataflow(unique("await"), latency_target_ms=200).source("s", schema=SCHEMA, event_time="ts")
         .key_by("key").window(tumbling_ms=50, parallelism=2).aggregate(n=count()).sink("o"))
    data = events(600, seed=3)
    name = rt.deploy(d)
    try:
        empty = rt.result_offsets(name)
        assert rt.await_results(name, after={a: e for a, (_, e) in
                                                                  empty.items()},
                                                    timeout_s=0.05) == empty
        rt.push(name, "s", data)
        after = {a: e for a, (_, e) in empty.items()}
        got = rt.await_results(name, "o", after=after, timeout_s=5.0)
        assert any(e > after[a] for a, (_, e) in got.items()), got
        rows = [r for a, (c, e) in got.items() for r, _, _ in rt.read_results(name, a, c, e)]
        expected = run_local(d, {"s": data}).sinks["o"]
        assert rows and all(r in expected for r in rows), rows  # readable: results
        rt.close(name)
        rt.wait_idle()
        ends = rt.await_results(name, after=after, timeout_s=0.05)
        assert sum(e for _, e in ends.values()) == len(expected)
    finally:
        rt.cancel(name)


@pytest.mark.parametrize("pool,p", [("cameo2", 1), ("cameo2", 2), ("fifo1", 2), ("edf2", 2),
                                    ("fair2", 2)])
def test_every_operator_equals_run_local(pools: Any, pool: str, p: int) -> None:
    rt = pools[pool]
    data = events(3000, seed=p)
    for d in flows(unique(pool), p):
        expected = run_local(d, {s.id: data for s in d.spec.sources})
        got = run_on(rt, d, data)
        assert expected.sinks["o"], f"{d.name}: the reference produced nothing; the test data is off"
        assert canon(got) == canon(expected.sinks["o"]), d.name
        assert canon(got) == canon(zoo_expected(d.name, data) or []), d.name  # DuckDB agrees
        assert d.name not in [x["name"] for x in rt.list(["running", "finishing"])]


def test_every_operator_fed_columns_equals_run_local_fed_rows(pools: Any) -> None:
    """Arrow pushes, across two executors (columns on the links between them): the
    results of rows, with columns wherever a step has a kernel."""
    rt = pools["cameo2"]
    data = events(3000, seed=5)
    for d in flows(unique("columns"), 2):
        expected = run_local(d, {s.id: data for s in d.spec.sources})
        got = run_on(rt, d, data, columns=True)
        assert canon(got) == canon(expected.sinks["o"]), d.name


def test_columns_that_do_not_fit_the_schema_are_refused_whole(pools: Any) -> None:
    rt = pools["cameo2"]
    d = Dataflow(unique("refused"), latency_target_ms=100).source("s", schema=SCHEMA).sink("o")
    name = rt.deploy(d)
    try:
        good = pa.Table.from_pylist(events(10))
        with pytest.raises(ColumnsRefused, match="column 'value': expected a floating-point or "
                                                 "integer column, got string. Fix: cast it to float64"):
            rt.push(name, "s", good.set_column(3, "value", pa.array(["x"] * 10)))
        rt.push(name, "s", good)
        rt.close(name)
        rt.wait_idle()
        assert canon(rt.results(name)) == canon(events(10))
    finally:
        rt.cancel(name)


def test_isolated_mode_gives_each_dataflow_its_own_executor(pools: Any) -> None:
    rt = pools["isolated2"]
    a = Dataflow(unique("iso-a"), latency_target_ms=50).source("s", schema=SCHEMA).sink("o")
    b = Dataflow(unique("iso-b"), latency_target_ms=50).source("s", schema=SCHEMA).sink("o")
    c = Dataflow(unique("iso-c"), latency_target_ms=50).source("s", schema=SCHEMA).sink("o")
    na, nb = rt.deploy(a), rt.deploy(b)
    try:
        listed = {x["name"]: x["executors"] for x in rt.list()}
        assert {tuple(listed[na]), tuple(listed[nb])} == {(0,), (1,)}
        with pytest.raises(Exception, match="dedicated executor"):
            rt.deploy(c)
        data = events(500)
        rt.push(na, "s", data)
        rt.push(nb, "s", data)
        rt.wait_idle()
        assert len(rt.results(na)) == len(rt.results(nb)) == 500
    finally:
        rt.cancel(na)
        rt.cancel(nb)


def test_cancel_one_tenant_while_the_other_continues(pools: Any) -> None:
    rt = pools["cameo2"]
    keep = (Dataflow(unique("keep"), latency_target_ms=50, tenant="a")
            .source("s", schema=SCHEMA, event_time="ts").filter("level == 'ERROR'").sink("o"))
    drop = (Dataflow(unique("drop"), latency_target_ms=1000, tenant="b")
            .source("s", schema=SCHEMA, event_time="ts").key_by("key").window(tumbling_ms=100)
            .aggregate(n=count()).sink("o"))
    nk, nd = rt.deploy(keep), rt.deploy(drop)
    data = events(4000)
    rt.push(nk, "s", data[:2000])
    rt.push(nd, "s", data[:2000])
    result = rt.cancel(nd)
    assert result["state"] == "cancelled"
    assert [x["state"] for x in rt.list() if x["name"] == nd] == ["cancelled"]
    rt.push(nk, "s", data[2000:])
    rt.wait_idle()
    got = rt.results(nk)
    assert len(got) == sum(1 for e in data if e["level"] == "ERROR")
    assert all(s["activations"] >= 0 for s in rt.executor_stats())
    again = rt.cancel(nd)  # a second cancel changes nothing and says so
    assert again["state"] == "cancelled" and again["ended_before"]
    with pytest.raises(Exception, match="no dataflow named"):
        rt.cancel("never-deployed")
    rt.cancel(nk)


def test_failing_user_function_is_reported_and_others_run(pools: Any) -> None:
    rt = pools["cameo2"]
    bad = (Dataflow(unique("bad"), latency_target_ms=50).source("s", schema=SCHEMA)
           .map(function="tests.udfs:double", id="dbl").sink("o"))
    good = Dataflow(unique("good"), latency_target_ms=50).source("s", schema=SCHEMA).sink("o")
    nb, ng = rt.deploy(bad), rt.deploy(good)
    try:
        data = events(1000)
        rt.push(nb, "s", data)
        rt.push(ng, "s", data)
        rt.wait_idle()
        negatives = sum(1 for e in data if e["value"] < 0)
        stats = rt.stats(nb)
        assert stats["errors"] == {"dbl:user_function": negatives}
        errors = rt.errors(nb)
        assert errors and errors[0].step == "dbl" and "negative value" in errors[0].message
        assert len(rt.results(nb)) == 1000 - negatives
        assert len(rt.results(ng)) == 1000
    finally:
        rt.cancel(nb)
        rt.cancel(ng)


def test_schema_mismatch_goes_to_error_output(pools: Any) -> None:
    rt = pools["cameo2"]
    d = Dataflow(unique("schema"), latency_target_ms=50).source("s", schema=SCHEMA).sink("o")
    name = rt.deploy(d)
    try:
        rows = events(10)
        rows[3] = {**rows[3], "value": "high"}
        rows[5] = {"ts": 1}
        rt.push(name, "s", rows)
        rt.wait_idle()
        assert len(rt.results(name)) == 8
        assert rt.stats(name)["errors"] == {"s:malformed": 2}
    finally:
        rt.cancel(name)


def test_bad_deploys_change_nothing(pools: Any) -> None:
    rt = pools["cameo2"]
    before = rt.list()
    spec = (Dataflow(unique("x"), latency_target_ms=5).source("s", schema=SCHEMA).sink("o")).spec.to_dict()
    spec["steps"][0]["schema"]["ts"] = "timestamp"
    with pytest.raises(SpecError, match="field types from"):
        rt.deploy(spec)
    missing_fn = (Dataflow(unique("y"), latency_target_ms=5).source("s", schema=SCHEMA)
                  .map(function="no_such_module_q:f").sink("o"))
    with pytest.raises(SpecError, match="importable module"):
        rt.deploy(missing_fn)
    assert rt.list() == before
    twice = Dataflow(unique("twice"), latency_target_ms=5).source("s", schema=SCHEMA).sink("o")
    name = rt.deploy(twice)
    with pytest.raises(Exception, match="running already"):
        rt.deploy(twice)
    rt.cancel(name)


def test_order_is_kept_per_channel_across_executors(pools: Any) -> None:
    """Source and map instances 1 live on the other executor than the sink: their
    batches cross a Ray link, and must arrive in order."""
    rt = pools["cameo2"]
    d = (Dataflow(unique("order"), latency_target_ms=100)
         .source("s", schema={"seq": "int"}, parallelism=2)
         .map({"seq": "seq"}, parallelism=2).sink("o"))
    name = rt.deploy(d)
    hosts = rt.describe(name)["hosts"]
    assert hosts[f"{name}/s/1"] != hosts[f"{name}/o/0"]
    try:
        batch = 7
        data = [{"seq": i} for i in range(7000)]
        rt.push(name, "s", data, batch_size=batch)
        rt.wait_idle()
        got = [r["seq"] for r in rt.results(name)]
        assert sorted(got) == list(range(7000))
        for instance in (0, 1):
            mine = [s for s in got if (s // batch) % 2 == instance]
            assert mine == sorted(mine), f"instance {instance} reordered"
    finally:
        rt.cancel(name)


def test_backpressure_with_tiny_credits_loses_nothing(pools: Any) -> None:
    rt = pools["tiny_credits"]
    d = (Dataflow(unique("bp"), latency_target_ms=100)
         .source("s", schema=SCHEMA, event_time="ts", parallelism=2)
         .map({"ts": "ts", "key": "key", "value": "value"}, parallelism=2)
         .key_by("key").window(tumbling_ms=20, parallelism=2).aggregate(n=count()).sink("o"))
    data = events(6000, disorder_ms=1)
    expected = run_local(d, {"s": data}).sinks["o"]
    name = rt.deploy(d)
    try:
        got: list[dict[str, Any]] = []
        for i in range(0, len(data), 500):
            rt.push(name, "s", data[i:i + 500], batch_size=50)
            got += rt.results(name)  # reading commits, so a full result log frees the sink
        rt.close(name)
        for _ in range(100):
            got += rt.results(name)
            try:
                rt.wait_idle(timeout_s=0.5)
                break
            except TimeoutError:
                continue
        got += rt.results(name)
        assert canon(got) == canon(expected)
    finally:
        rt.cancel(name)


def test_latency_is_recorded_per_dataflow(pools: Any) -> None:
    rt = pools["cameo2"]
    d = (Dataflow(unique("lat"), latency_target_ms=10_000).source("s", schema=SCHEMA).sink("o"))
    name = rt.deploy(d)
    try:
        rt.push(name, "s", events(2000))
        rt.wait_idle()
        rows = rt.result_rows(name)
        assert len(rows) == 2000
        assert all(egress >= ingest for _, ingest, egress in rows)
        s = rt.stats(name)
        assert s["results"] == 2000 and s["within_target"] == 1.0
        assert 0 <= s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]
        assert s["events_in"] == 2000 and s["backlog"] == 0
        rt.update(name, latency_target_ms=0.000001)
        rt.push(name, "s", events(100))
        rt.wait_idle()
        assert rt.stats(name)["within_target"] < 1.0
    finally:
        rt.cancel(name)


def test_events_that_cannot_be_carried_are_refused_alone_and_the_rest_flows(pools: Any) -> None:
    import decimal
    import math

    rt = pools["cameo2"]
    d = (Dataflow(unique("edge"), latency_target_ms=50)
         .source("s", schema={"ts": "int", "value": "float", "extra": "any"}, parallelism=2)
         .sink("o"))
    name = rt.deploy(d)
    try:
        ok = [{"ts": i, "value": float(i), "extra": [i]} for i in range(12)]
        deep: Any = 1
        for _ in range(1000):
            deep = [deep]
        batch = ok[:3] + [{"ts": 2**70, "value": 1.0, "extra": None},
                          {"ts": 3, "value": math.nan, "extra": None},
                          {"ts": 4, "value": 1.0, "extra": decimal.Decimal("1.5")},
                          {"ts": 5, "value": 1.0, "extra": deep}] + ok[3:6]
        rejected = rt.push(name, "s", batch)
        assert [(r["index"], r["field"]) for r in rejected] == [(3, "ts"), (5, "extra"), (6, "extra")]
        # Round robin over the two source instances: the third push goes where the first
        # went, and is not held behind a lost sequence number.
        assert rt.push(name, "s", ok[6:9]) == [] and rt.push(name, "s", ok[9:]) == []
        rt.wait_idle()
        assert canon(rt.results(name)) == canon(ok)
        assert rt.stats(name)["errors"] == {"s:unencodable": 3, "s:malformed": 1}
        messages = sorted(e.message for e in rt.errors(name))
        assert messages[0].startswith("event 3 of the push: field 'ts': expected an integer")
        assert messages[-1].startswith("field 'value': expected a finite float, got nan")
    finally:
        rt.cancel(name)


def test_an_idle_source_instance_lets_the_windows_after_it_fire(pools: Any) -> None:
    """A source of parallelism 2 fed by one push: its other instance takes in nothing.
    Without an idle timeout that instance holds every window; with one, the windows
    fire before the stream closes, and the results at the end equal run_local's."""
    import time

    rt = pools["cameo2"]
    data = [{"ts": t, "k": f"k{t % 4}"} for t in range(0, 400, 2)]
    fired: dict[float | None, list[Any]] = {}
    for timeout in (None, 100.0):
        d = (Dataflow(unique("idle"), latency_target_ms=200)
             .source("s", schema={"ts": "int", "k": "str"}, event_time="ts", parallelism=2,
                     idle_timeout_ms=timeout)
             .key_by("k").window(tumbling_ms=100, parallelism=2).aggregate(n=count()).sink("o"))
        name = rt.deploy(d)
        try:
            rt.push(name, "s", data, batch_size=len(data))  # one call: one instance
            deadline = time.monotonic() + 30
            fired[timeout] = []
            while True:
                rt.wait_idle()  # ends with a checkpoint: what fired is readable
                fired[timeout] += rt.results(name)  # each read returns what came since
                if fired[timeout] or timeout is None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            rt.close(name)
            rt.wait_idle()
            expected = run_local(d, {"s": data}).sinks["o"]
            assert canon(fired[timeout] + rt.results(name)) == canon(expected)
        finally:
            rt.cancel(name)
    assert fired[None] == []
    # Windows [0, 100) .. [200, 300) end by the watermark 398: fired while the stream is open.
    assert sorted({r["window_start"] for r in fired[100.0]}) == [0, 100, 200]
