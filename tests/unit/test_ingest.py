"""Every event either enters or is refused, never half (issue 12, part 1).

The edge (`runtime/_private/ingest.py`) packs a batch before its call is
sequenced and turns what msgpack cannot carry into error records; the source
operator refuses values out of bounds. Here both run in process, with an
`ExecutorCore` on a fake clock, against an oracle written from the rules.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import random
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, run_local
from cameo_actors.clock import FakeClock
from cameo_actors.runtime._private.exchange.ingest import (
    MAX_EVENT_DEPTH,
    MSGPACK_NESTING,
    _deeper_than,
    _packb_capped,
    pack_ingest,
    unpack_ingest,
)
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.placement import place
from cameo_actors.runtime.config import RuntimeConfig
from spark_ingest.arrow import prepare, to_events
from tests.shared.service_fakes import ADMIN, Service, auth, flow

SCHEMA = {"ts": "int", "f": "float", "s": "str", "b": "bool", "a": "any"}
MAX_CHARS = 8


def nest(n: int, inner: Any = 1) -> Any:
    """`inner` inside n lists."""
    for _ in range(n):
        inner = [inner]
    return inner


def good(i: int) -> dict[str, Any]:
    return {"ts": i, "f": i / 2, "s": f"e{i % 1000}", "b": i % 2 == 0, "a": {"i": [i]}}


# -- the packing helper -------------------------------------------------------------------------
def test_msgpack_nesting_limit_is_what_the_cap_assumes() -> None:
    msgpack.packb(nest(MSGPACK_NESTING))  # a value inside 1024 containers packs ...
    with pytest.raises(ValueError, match="recursion"):
        msgpack.packb(nest(MSGPACK_NESTING + 1))  # ... one more does not


@pytest.mark.parametrize("inner", [1, [], {"k": "v"}])
def test_the_cap_refuses_exactly_the_events_nested_deeper_than_the_limit(inner: Any) -> None:
    # {"x": nest(d)} puts `inner` inside d + 1 containers (the event is one).
    inner_levels = levels(inner)  # a non-empty container adds the level of its children
    at_limit = {"x": nest(MAX_EVENT_DEPTH - 1 - inner_levels, inner)}
    over = {"x": nest(MAX_EVENT_DEPTH - inner_levels, inner)}
    assert _packb_capped([[at_limit]], 2) == msgpack.packb([[at_limit]], use_bin_type=True)
    assert not _deeper_than(at_limit, MAX_EVENT_DEPTH)
    with pytest.raises(ValueError):
        _packb_capped([[over]], 2)
    assert _deeper_than(over, MAX_EVENT_DEPTH)


def test_a_batch_that_packs_is_one_plain_packb() -> None:
    events = [good(i) for i in range(50)]
    packed = pack_ingest("s", events)
    assert packed.blob == msgpack.packb([events], use_bin_type=True) and packed.rejected == []
    assert unpack_ingest(packed.blob, "s") == [events]


def test_the_cap_holds_whether_a_batch_has_few_containers_or_many() -> None:
    # A few events hold fewer containers than the limit: one plain packb decides. Many
    # hold more: the padded packb decides, and a deep event among them is still refused.
    deep = {"x": nest(MAX_EVENT_DEPTH)}
    for events in ([good(1), deep], [good(i) for i in range(300)] + [deep]):
        packed = pack_ingest("s", events)
        assert [r["index"] for r in packed.rejected] == [len(events) - 1]
        assert unpack_ingest(packed.blob, "s")[0] == events[:-1]


def test_each_event_that_cannot_be_carried_is_refused_alone_with_index_and_field() -> None:
    bad = {3: ({"ts": 2**70}, "ts", "an integer within 64 bits"),
           5: ({"ts": 1, "price": decimal.Decimal("1.5")}, "price", "Decimal('1.5')"),
           6: ({"ts": 1, "at": datetime.date(2024, 1, 2)}, "at", "can not serialize"),
           8: ({"ts": 1, "deep": nest(1000)}, "deep", f"at most {MAX_EVENT_DEPTH} levels"),
           9: ({"ts": 1, "s": "a\ud800"}, "s", "valid UTF-8"),
           11: ({1: {decimal.Decimal(1): 2}}, "1", "Decimal"),
           12: (decimal.Decimal(7), None, "JSON-like data")}
    events: list[Any] = [good(i) for i in range(14)]
    for i, (event, _, _) in bad.items():
        events[i] = event
    packed = pack_ingest("logs", events, first_index=100)
    assert [(r["index"], r["field"]) for r in packed.rejected] == \
        [(100 + i, field) for i, (_, field, _) in bad.items()]
    for r, (_, _, needle) in zip(packed.rejected, bad.values(), strict=True):
        assert needle in r["reason"] and "Fix: " in r["reason"], r
    items = unpack_ingest(packed.blob, "logs")
    assert items[0] == [e for i, e in enumerate(events) if i not in bad]  # in order
    records = items[1]["errors"]
    assert [(step, kind) for step, kind, _, _ in records] == [("logs", "unencodable")] * len(bad)
    assert records[0][2].startswith("event 103 of the push: field 'ts': expected")
    assert records[0][3] == {"ts": "1180591620717411303424"}  # what it was, packable


def test_what_msgpack_packs_but_cannot_read_back_is_sorted_out_on_the_executor() -> None:
    events = [good(0), {"ts": 1, "by": {(1, 2): 3}}, good(2)]  # a tuple as a dict key
    packed = pack_ingest("s", events)
    assert packed.rejected == []  # only the executor finds out
    items = unpack_ingest(packed.blob, "s")
    assert items[0] == [good(0), good(2)]
    (record,) = items[1]["errors"]
    assert record[:2] == ["s", "unencodable"] and "dict keys" in record[2]


def test_an_unreadable_call_becomes_one_record_instead_of_raising() -> None:
    (item,) = unpack_ingest(b"\xc1\x00garbage", "s")
    assert item["errors"][0][:2] == ["s", "unencodable"]


def test_spark_rows_msgpack_cannot_carry_are_refused_row_by_row() -> None:
    # prepare() converts top-level timestamps, dates and decimals; nested ones stay objects.
    when = datetime.datetime(2024, 1, 1)
    rb = pa.record_batch({
        "ts": pa.array([1, 2, 3], pa.int64()),
        "when": pa.array([when] * 3, pa.timestamp("us", tz="UTC")),
        "price": pa.array([decimal.Decimal("1.5")] * 3, pa.decimal128(10, 2)),
        "nested": pa.array([None, {"t": when}, None], pa.struct([("t", pa.timestamp("us"))])),
        "took": pa.array([None, None, datetime.timedelta(seconds=1)], pa.duration("us")),
    })
    packed = pack_ingest("s", to_events(prepare(rb, None)))
    assert [(r["index"], r["field"]) for r in packed.rejected] == [(1, "nested"), (2, "took")]
    assert unpack_ingest(packed.blob, "s")[0] == [
        {"ts": 1, "when": 1704067200000, "price": 1.5, "nested": None, "took": None}]


# -- the source operator -----------------------------------------------------------------------
def test_source_refuses_non_finite_floats_wide_ints_and_long_text_naming_the_field() -> None:
    d = Dataflow("b", latency_target_ms=50).source("s", schema={"i": "int", "f": "float",
                                                                "t": "str"}).sink("o")
    ok = {"i": 2**64 - 1, "f": -(2**63), "t": "x"}
    rows = [ok, {**ok, "f": math.nan}, {**ok, "f": -math.inf}, {**ok, "i": 2**64},
            {**ok, "f": 2**64}, {**ok, "t": "y" * (2**20 + 1)}, {**ok, "i": -(2**63)}]
    result = run_local(d, {"s": rows})
    assert result["o"] == [ok, {**ok, "i": -(2**63)}]
    messages = [e.message for e in result.errors]
    assert [e.kind for e in result.errors] == ["malformed"] * 5
    assert messages[0].startswith("field 'f': expected a finite float, got nan (JSON cannot")
    assert messages[1].startswith("field 'f': expected a finite float, got -inf")
    assert messages[2].startswith("field 'i': expected an integer within 64 bits")
    assert messages[3].startswith("field 'f': expected an integer within 64 bits")
    assert "at most 1048576 characters, got 1048577" in messages[4]
    kept = result.errors[4].event["t"]  # the record keeps the text cut
    assert kept.startswith("yyy") and kept.endswith("(1048577 characters)") and len(kept) < 200


def test_max_string_chars_is_a_pool_setting_that_reaches_the_sources() -> None:
    with pytest.raises(ValueError, match="max_string_chars: expected an int > 0"):
        RuntimeConfig(max_string_chars=0)
    core = Core(RuntimeConfig(max_string_chars=3))
    core.push([{"t": "abc"}, {"t": "abcd"}], schema_name="strs")
    assert core.results() == [{"t": "abc"}]
    assert core.errors() == {"s:malformed": 1}


# -- the runtime's core, in process ----------------------------------------------------------
class Core:
    """One ExecutorCore hosting `source -> sink`, fed through the packing helper."""

    def __init__(self, config: RuntimeConfig, seed: int = 0) -> None:
        self.core = ExecutorCore(0, config, lambda host, blob: None, FakeClock(1_000_000.0))
        self.rng = random.Random(seed)
        self.seq = 0
        self.name = ""
        self.pushed = 0

    def deploy(self, name: str, schema: dict[str, str]) -> None:
        self.name = name
        spec = Dataflow(name, latency_target_ms=50).source("s", schema=schema).sink("o").spec
        self.core.deploy(spec, place(spec, [0], {}))

    def push(self, events: list[Any], schema_name: str | None = None) -> list[Any]:
        """As Runtime.push: returns the rejections; calls may arrive out of order."""
        if schema_name is not None:
            self.deploy(schema_name, {"t": "str"})
        calls, rejected = [], []
        for i in range(0, len(events), 7):
            packed = pack_ingest("s", events[i:i + 7], self.pushed + i)
            rejected += packed.rejected
            calls.append((self.seq, unpack_ingest(packed.blob, "s")))
            self.seq += 1
        self.pushed += len(events)
        self.rng.shuffle(calls)  # Ray may reorder calls; the channel restores the order
        for seq, items in calls:
            self.core.ingress.ingest("client", seq, f"{self.name}/s/0", items, self.core.clock.now_ms())
        for _ in range(100_000):
            self.core.clock.advance(0.1)
            if not self.core.run_slice():
                break
        return rejected

    def results(self) -> list[Any]:
        return [e for e, _, _ in self.core.egress.read_results(self.name, f"{self.name}/o/0", 0, None)]

    def errors(self) -> dict[str, int]:
        return self.core.egress.error_counts(self.name)


def levels(value: Any) -> int:
    """Containers around the deepest value inside `value` (the oracle's own count)."""
    children = list(value.keys()) + list(value.values()) if isinstance(value, dict) \
        else value if isinstance(value, (list, tuple)) else []
    return 1 + max(levels(c) for c in children) if children else 0


def carried(event: Any) -> bool:
    try:
        msgpack.packb(event, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return levels(event) <= MAX_EVENT_DEPTH


def fits(event: dict[str, Any]) -> bool:
    """The schema, its bounds included (int: 64 bits, float: finite, str: MAX_CHARS)."""
    def in_range(v: Any) -> bool:
        return -(2**63) <= v <= 2**64 - 1
    ts, f, s, b = (event.get(k) for k in ("ts", "f", "s", "b"))
    return (all(k in event for k in ("ts", "f", "s", "b"))
            and type(ts) is int and in_range(ts)
            and ((type(f) is float and math.isfinite(f)) or (type(f) is int and in_range(f)))
            and type(s) is str and len(s) <= MAX_CHARS and type(b) is bool)


scalars = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.text(max_size=MAX_CHARS + 3) | st.just("lone \ud800"))
json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
wild = (json_like | st.integers(MAX_EVENT_DEPTH - 3, MAX_EVENT_DEPTH + 3).map(nest)
        | st.sampled_from([decimal.Decimal("2.5"), datetime.datetime(2024, 5, 1), 2**64, -(2**63) - 1,
                           math.nan, math.inf, "x" * (MAX_CHARS + 1)]))


@st.composite
def batches(draw: st.DrawFn) -> list[Any]:
    """Good events, some with one field (or the whole event) replaced by a wild value."""
    events: list[Any] = []
    for i in range(draw(st.integers(0, 40))):
        e: Any = good(i)
        spoil = draw(st.sampled_from([None, None, "ts", "f", "s", "b", "a", "new", "whole"]))
        if spoil == "whole":
            e = draw(wild)
        elif spoil is not None:
            e[spoil] = draw(wild)
        events.append(e)
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=batches(), seed=st.integers(0, 1000))
def test_the_dataflow_keeps_the_good_events_and_counts_every_bad_one(events: list[Any],
                                                                     seed: int) -> None:
    core = Core(RuntimeConfig(max_string_chars=MAX_CHARS), seed)
    core.deploy("prop", SCHEMA)
    rejected = core.push(events)
    unencodable = [i for i, e in enumerate(events) if not carried(e)]
    malformed = [i for i, e in enumerate(events)
                 if carried(e) and not (isinstance(e, dict) and fits(e))]
    # The source makes a float field's int a float (as Spark's JSON reader does).
    expected = [{**e, "f": float(e["f"])} for i, e in enumerate(events)
                if i not in unencodable and i not in malformed]

    assert [r["index"] for r in rejected] == unencodable
    # msgpack of both sides: exact, and NaN (in an `any` field) equals itself.
    assert msgpack.packb(core.results()) == msgpack.packb(expected)
    want = {"s:unencodable": len(unencodable), "s:malformed": len(malformed)}
    assert core.errors() == {k: n for k, n in want.items() if n}
    # Nothing wedged: the next good events come out behind them.
    more = [good(i) for i in range(1000, 1010)]
    assert core.push(more) == []
    assert msgpack.packb(core.results()) == msgpack.packb(expected + more)


# -- the HTTP API and the client ------------------------------------------------------------------
def test_an_http_push_answers_what_it_refused_and_the_rest_goes_on(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("p"))
    ok = {"ts": 1, "level": "ERROR", "key": "k"}
    body = json.dumps([ok, {**ok, "ts": 2**70}, ok, {**ok, "key": [1]}])  # JSON carries any int
    r = svc.http.post("/v1/dataflows/p/sources/s/events", content=body,
                      headers={**auth(), "Content-Type": "application/json"})
    assert r.status_code == 202, r.text
    got = r.json()
    assert (got["accepted"], got["rejected"]) == (3, 1)
    (rejection,) = got["rejections"]
    assert (rejection["index"], rejection["field"]) == (1, "ts")
    assert "expected an integer within 64 bits" in rejection["reason"]
    assert svc.rt.flows["p"]["events"] == 3  # the schema's own checks come later, at the source


def test_the_client_counts_refusals_over_its_requests_in_the_callers_indexes(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("q"))
    events = [{"ts": i, "level": "ERROR", "key": "k"} for i in range(7)]
    events[3]["ts"] = events[6]["ts"] = 2**65
    pushed = c.push("q", "s", events, batch_size=2, use_msgpack=False)  # 4 requests
    assert pushed == 5 and pushed.accepted == pushed["accepted"] == 5  # still an int
    assert pushed.rejected == 2
    assert [(r["index"], r["field"]) for r in pushed["rejections"]] == [(3, "ts"), (6, "ts")]
