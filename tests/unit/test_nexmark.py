"""The Nexmark kit: the generator's stream, and every query in-process against DuckDB."""

from __future__ import annotations

import doctest
import json
from typing import Any

import pytest

from cameo_actors import DataflowSpec, nexmark
from cameo_actors.nexmark import functions, generator, queries, reference
from cameo_actors.nexmark.generator import NexmarkConfig, events_in_time_order, generate
from cameo_actors.nexmark.queries import QUERIES, SINK, SOURCE, STATELESS
from cameo_actors.testing import TestingSource, run_local
from tests.shared.nexmark import BATCH, CONFIG, assert_matches, stream

# -- the generator ---------------------------------------------------------------------------

def test_every_50_events_are_1_person_3_auctions_46_bids_in_that_order() -> None:
    events = events_in_time_order(NexmarkConfig(events=1_000, seed=1))
    for i in range(0, 1_000, 50):
        assert [e["kind"] for e in events[i:i + 50]] == ["person"] + ["auction"] * 3 + ["bid"] * 46
    assert generate(events=1_000, seed=1).counts() == {"person": 20, "auction": 60, "bid": 920}


def test_ids_times_and_references_follow_the_reference_generator() -> None:
    config = NexmarkConfig(events=5_000, seed=2, rate_eps=1_000)
    events = events_in_time_order(config)
    assert [e["date_time"] for e in events] == [config.base_time_ms + i for i in range(5_000)]
    persons = [e for e in events if e["kind"] == "person"]
    auctions = [e for e in events if e["kind"] == "auction"]
    bids = [e for e in events if e["kind"] == "bid"]
    assert [p["id"] for p in persons] == list(range(1000, 1000 + len(persons)))
    assert [a["id"] for a in auctions] == list(range(1000, 1000 + len(auctions)))
    for e in events:
        assert set(e) == {"kind", *generator.FIELDS[e["kind"]]}
    created: dict[int, int] = {}
    for e in events:
        if e["kind"] == "person":
            created[e["id"]] = e["date_time"]
        elif e["kind"] == "auction":
            assert created[e["seller"]] <= e["date_time"]  # a seller is an earlier person
            assert 10 <= e["category"] <= 14 and e["expires"] > e["date_time"]
            assert e["reserve"] > e["initial_bid"] >= 100
    assert all(100 <= b["price"] <= 100_000_000 for b in bids)
    assert {p["state"] for p in persons} == set(generator.US_STATES)
    # Hot auctions and bidders: about half the bids go to the hot auction, 3/4 to the hot bidder.
    hot_auction = sum(b["auction"] % 100 == 0 for b in bids) / len(bids)
    hot_bidder = sum(b["bidder"] % 100 == 1 for b in bids) / len(bids)
    assert 0.45 < hot_auction < 0.6 and 0.7 < hot_bidder < 0.8
    hot_channel = sum(b["channel"] in generator.HOT_CHANNELS for b in bids) / len(bids)
    assert 0.97 < hot_channel < 1.0
    # extra pads a bid to 100 bytes on average: 68 characters beside 32 bytes of numbers.
    assert 64 < sum(len(b["extra"]) for b in bids) / len(bids) < 72


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    config = NexmarkConfig(events=2_000, seed=5, max_disorder_ms=500, late_share=0.02,
                           rate_eps=20)
    a, b = generate(config), generate(config)
    assert a.events == b.events and a.late == b.late and a.late
    other = generate(NexmarkConfig(events=2_000, seed=6, max_disorder_ms=500, late_share=0.02,
                                   rate_eps=20))
    assert other.events != a.events
    # Disorder and late events draw from their own generator: the events are the same ones.
    plain = generate(NexmarkConfig(events=2_000, seed=5, rate_eps=20))
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    assert sorted(map(key, a.events)) == sorted(map(key, plain.events))


def test_disorder_stays_within_max_disorder_ms() -> None:
    s = stream()
    on_time = s.on_time()
    newest = float("-inf")
    out_of_order = 0
    for e in on_time:
        assert e["date_time"] > newest - CONFIG.max_disorder_ms
        out_of_order += e["date_time"] < newest
        newest = max(newest, e["date_time"])
    assert out_of_order > len(on_time) // 10  # and there is disorder to speak of


def test_a_late_event_comes_once_the_stream_is_far_enough_past_it() -> None:
    s = stream()
    behind = CONFIG.late_by_ms + CONFIG.allowed_lateness_ms
    assert 0.004 < len(s.late) / len(s.events) < 0.02
    newest = float("-inf")
    for i, e in enumerate(s.events):
        if i in s.late:
            assert e["date_time"] + behind <= newest
        else:
            newest = max(newest, e["date_time"])
    # Held-back events the stream never got far enough past stay on time.
    last = max(e["date_time"] for e in s.events)
    assert all(e["date_time"] + behind <= last for e in s.late_events())


@pytest.mark.parametrize("batch", [1, 37, BATCH, 1_000])
def test_whether_an_event_is_late_does_not_depend_on_batching(batch: int) -> None:
    s = stream()
    result = run_local(queries.q11(), {SOURCE: TestingSource(s.events, batch_size=batch)})
    late_bids = sum(e["kind"] == "bid" for e in s.late_events())
    assert result.error_counts() == {("sessions", "late"): late_bids}
    assert_matches("q11", result[SINK])


def test_bad_configs_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="max_disorder_ms <= allowed_lateness_ms"):
        NexmarkConfig(max_disorder_ms=3_000, allowed_lateness_ms=2_000)
    with pytest.raises(ValueError, match="late_share"):
        NexmarkConfig(late_share=1.5)
    with pytest.raises(ValueError, match="rate_eps"):
        NexmarkConfig(rate_eps=0)


# -- the queries -----------------------------------------------------------------------------

@pytest.mark.parametrize("query", list(QUERIES))
def test_query_in_process_equals_the_reference(query: str) -> None:
    s = stream()
    result = run_local(QUERIES[query](), {SOURCE: TestingSource(s.events, batch_size=BATCH)})
    assert_matches(query, result[SINK])
    kinds = {kind for _, kind in result.error_counts()}
    if query in STATELESS:
        assert kinds == set()  # late events go through
    else:
        assert kinds == {"late"}, result.errors[:3]


@pytest.mark.parametrize("query", list(QUERIES))
def test_json_specs_equal_the_builders(query: str) -> None:
    written = queries.read_spec(query)
    built = QUERIES[query]().spec
    assert written == built.to_dict(), (f"cameo_actors/nexmark/specs/{query}.json is stale: "
                                        "run `python -m cameo_actors.nexmark`")
    assert DataflowSpec.from_dict(written) == built


def test_queries_are_definitions_only() -> None:
    d = QUERIES["q4"](parallelism=2, name="q4-p2", allowed_lateness_ms=500)
    spec = d.spec
    assert spec.name == "q4-p2" and spec.sources[0].allowed_lateness_ms == 500
    assert [s.parallelism for s in spec.steps if s.id in ("winning_bids", "category_average")] \
        == [2, 2]


def test_doctests() -> None:
    for module in (nexmark, generator, queries, functions, reference):
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__


def test_canonical_rows_ignore_order_and_float_noise() -> None:
    a: list[dict[str, Any]] = [{"x": 1.0, "y": 0.1 + 0.2}, {"x": 2, "y": "s"}]
    b: list[dict[str, Any]] = [{"y": "s", "x": 2}, {"y": 0.3, "x": 1}]
    assert reference.canonical(a) == reference.canonical(b)
    assert reference.difference(a, b) == ""
    assert "1 missing" in reference.difference(a[:1], b)
