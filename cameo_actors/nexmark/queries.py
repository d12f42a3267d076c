"""Nexmark queries Q0-Q8 and Q11 as cameo dataflows.

Every query reads one source, `SOURCE`, of the union stream (`SCHEMA`: each
event has a ``kind`` and ``date_time``; the other fields are nullable), with
``date_time`` as event time, and writes one sink, `SINK`. The standard
Nexmark semantics, adapted to event-time windows:

=====  ======================  =================================================================
query  name                    what it computes
=====  ======================  =================================================================
q0     passthrough             every bid (its seven fields)
q1     currency conversion     every bid with its price in euro cents: ``price * 908 // 1000``
                               (integer arithmetic: exact, no float rounding to argue about)
q2     selection               ``auction, price`` of the bids with ``auction % 123 == 0``
q3     local item suggestion   ``name, city, state, id``: persons in OR, ID or CA joined with the
                               auctions of category 10 they sell, by an interval join (person
                               left, auction right, ``0 <= auction time - person time <= 1 h``)
q4     average price per       per category, the running average of the closing prices of its
       category                auctions, one row per closed auction, in (expires, auction) order
q5     hot items               per 10 s window sliding every 2 s, the auction(s) with the most
                               bids
q6     average selling price   per seller, the average closing price of its last 10 closed
       by seller               auctions, one row per closed auction
q7     highest bid             per 10 s tumbling window, the bid(s) with the highest price
q8     monitor new users       persons and the auctions they created in the same 10 s tumbling
                               window: one row per (person, auction) pair
q11    user sessions           bids per bidder per session (a gap of 10 s ends one)
=====  ======================  =================================================================

An auction *closes* at its ``expires`` time; its closing price is its highest
valid bid (a bid whose time lies within ``[auction date_time, expires]``); an
auction without one does not close with a price (q4, q6; as in nexmark-flink,
the reserve is not checked). Ties are all kept (q5, q7).

Late events (behind the watermark) go to the error output in every query that
keeps state by time (q3-q8, q11); q0-q2 keep them.

Example:
    >>> from cameo_actors.testing import run_local
    >>> from cameo_actors.nexmark.generator import generate
    >>> stream = generate(events=500, seed=1, rate_eps=100)
    >>> rows = run_local(q1(), {SOURCE: stream.events})[SINK]
    >>> len(rows) == stream.counts()["bid"], sorted(rows[0])
    (True, ['auction', 'bidder', 'date_time', 'extra', 'price'])
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from cameo_actors.dataflow import Dataflow, Stream, count, max_by
from cameo_actors.nexmark.generator import FIELDS, SCHEMA

#: The source every query reads, and the sink it writes.
SOURCE = "events"
SINK = "results"
#: The source's allowed lateness (ms): the watermark trails the newest event time by this.
ALLOWED_LATENESS_MS = 2_000
#: Every query's latency target.
LATENCY_TARGET_MS = 1_000

#: Query parameters (the reference computes with the same).
Q1_RATE = (908, 1000)  # euros per dollar, as a fraction
Q2_MODULUS = 123
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
Q3_INTERVAL_MS = (0, 3_600_000)
WINDOW_MS = 10_000  # q5, q7, q8
Q5_SLIDE_MS = 2_000
Q6_LAST = 10
SESSION_GAP_MS = 10_000  # q11

_FUNCTIONS = "cameo_actors.nexmark.functions"


def _source(name: str, allowed_lateness_ms: int, parallelism: int = 1) -> Stream:
    """The events, read by `parallelism` instances: the filters and projections after them
    run as many (each chained to its source instance), and only a key crosses executors.
    One by default (the queries' `source_parallelism`): the watermark after several
    source instances is the least of theirs, so whether an event is late depends on how a
    feeder spreads the events over them (through the Spark tier, with two, the late events
    of `tests/integration/test_nexmark_spark.py` were no longer late)."""
    return Dataflow(name, latency_target_ms=LATENCY_TARGET_MS, tenant="nexmark").source(
        SOURCE, schema=SCHEMA, event_time="date_time", allowed_lateness_ms=allowed_lateness_ms,
        parallelism=parallelism)


def _kind(events: Stream, kind: str, *fields: str) -> Stream:
    """The events of one kind, projected to `fields` (nexmark-flink's person/auction/bid views)."""
    return events.filter(f"kind == '{kind}'", id=f"{kind}s").project(*fields, id=f"{kind}_fields")


def q0(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q0",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Passthrough: every bid."""
    return _kind(_source(name, allowed_lateness_ms, source_parallelism), "bid", *FIELDS["bid"]).sink(SINK)


def q1(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q1",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Currency conversion: every bid, its price in euro cents (rounded down)."""
    num, den = Q1_RATE
    return (_source(name, allowed_lateness_ms, source_parallelism).filter("kind == 'bid'", id="bids")
            .map({"auction": "auction", "bidder": "bidder", "price": f"price * {num} // {den}",
                  "date_time": "date_time", "extra": "extra"}, id="convert")
            .sink(SINK))


def q2(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q2",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Selection: the bids on auctions whose id is a multiple of 123."""
    return (_source(name, allowed_lateness_ms, source_parallelism)
            .filter(f"kind == 'bid' and auction % {Q2_MODULUS} == 0", id="select")
            .project("auction", "price", id="auction_price")
            .sink(SINK))


def q3(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q3",
       parallelism: int = 1, source_parallelism: int = 1, interval_ms: tuple[int, int] = Q3_INTERVAL_MS) -> Dataflow:
    """Local item suggestion: who sells in OR, ID or CA in category 10, and which auctions.

    An interval join: a person and an auction it sells join when the auction comes within
    `interval_ms` after the person (the generator's sellers are always earlier persons).
    """
    events = _source(name, allowed_lateness_ms, source_parallelism)
    states = ", ".join(f"'{s}'" for s in Q3_STATES)
    persons = (events.filter(f"kind == 'person' and state in ({states})", id="local_persons")
               .project("id", "name", "city", "state", "date_time", id="person_fields")
               .key_by("id", id="by_person"))
    auctions = (events.filter(f"kind == 'auction' and category == {Q3_CATEGORY}",
                              id="category_auctions")
                .project("id", "seller", "date_time", id="auction_fields")
                .key_by("seller", id="by_seller"))
    return (persons.join(auctions, interval_ms=interval_ms, id="sellers",
                         parallelism=parallelism)
            .map({"name": "left.name", "city": "left.city", "state": "left.state",
                  "id": "right.id"}, id="suggest")
            .sink(SINK))


def _closings(events: Stream, parallelism: int) -> Stream:
    """Q4's and Q6's first stage: the closing price of every auction that had a valid bid,
    ``{auction, seller, category, price, date_time: expires}``."""
    return (events.filter("kind == 'auction' or kind == 'bid'", id="auctions_and_bids")
            .key_by("id if kind == 'auction' else auction", id="by_auction")
            .process(f"{_FUNCTIONS}:WinningBids", time_field="date_time",
                     id="winning_bids", parallelism=parallelism))


def q4(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q4",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Average closing price per category, updated at every closing:
    ``{category, date_time, auction, price, avg_price}``."""
    return (_closings(_source(name, allowed_lateness_ms, source_parallelism), parallelism)
            .key_by("category", id="by_category")
            .process(f"{_FUNCTIONS}:CategoryAverage", time_field="date_time",
                     id="category_average", parallelism=parallelism)
            .sink(SINK))


def q5(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q5",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Hot items: per sliding window, the auction(s) with the most bids,
    ``{auction, n, window_start, window_end}``."""
    return (_kind(_source(name, allowed_lateness_ms, source_parallelism), "bid", "auction", "date_time")
            .key_by("auction", id="by_auction")
            .window(sliding_ms=WINDOW_MS, slide_ms=Q5_SLIDE_MS, id="bids_per_auction",
                    parallelism=parallelism)
            .aggregate(n=count())
            # Each sliding window's results carry date_time = window_end - 1: a tumbling
            # window as long as the slide holds exactly one sliding window's results.
            .window(tumbling_ms=Q5_SLIDE_MS, id="hottest")
            .aggregate(hot=max_by("n"))
            .flat_map(f"{_FUNCTIONS}:hot_items", id="hot_items")
            .sink(SINK))


def q6(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q6",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Average selling price per seller over its last 10 closed auctions, updated at every
    closing: ``{seller, date_time, auction, price, avg_price}``."""
    return (_closings(_source(name, allowed_lateness_ms, source_parallelism), parallelism)
            .key_by("seller", id="by_seller")
            .process(f"{_FUNCTIONS}:SellerAverage", time_field="date_time",
                     id="seller_average", parallelism=parallelism)
            .sink(SINK))


def q7(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q7",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """Highest bid: per 10 s tumbling window, the bid(s) with the highest price,
    ``{auction, bidder, price, date_time, window_end}``."""
    return (_kind(_source(name, allowed_lateness_ms, source_parallelism), "bid", "auction", "bidder", "price",
                  "date_time")
            .window(tumbling_ms=WINDOW_MS, id="highest")
            .aggregate(top=max_by("price"))
            .flat_map(f"{_FUNCTIONS}:highest_bids", id="highest_bids")
            .sink(SINK))


def q8(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q8",
       parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """New users: persons who created an auction in the 10 s window they registered in,
    ``{id, name, auction, window_start, window_end}`` per (person, auction)."""
    events = _source(name, allowed_lateness_ms, source_parallelism)
    persons = _kind(events, "person", "id", "name", "date_time").key_by("id", id="by_person")
    auctions = _kind(events, "auction", "id", "seller", "date_time").key_by("seller",
                                                                            id="by_seller")
    return (persons.join(auctions, tumbling_ms=WINDOW_MS, id="new_sellers",
                         parallelism=parallelism)
            .map({"id": "key", "name": "left.name", "auction": "right.id",
                  "window_start": "window_start", "window_end": "window_end"}, id="new_users")
            .sink(SINK))


def q11(*, allowed_lateness_ms: int = ALLOWED_LATENESS_MS, name: str = "nexmark-q11",
        parallelism: int = 1, source_parallelism: int = 1) -> Dataflow:
    """User sessions: bids per bidder per session, ``{bidder, n, window_start, window_end}``
    (a session is ``[first bid, last bid + 10 s)``)."""
    return (_kind(_source(name, allowed_lateness_ms, source_parallelism), "bid", "bidder", "date_time")
            .key_by("bidder", id="by_bidder")
            .window(session_gap_ms=SESSION_GAP_MS, id="sessions", parallelism=parallelism)
            .aggregate(n=count())
            .map({"bidder": "key", "n": "n", "window_start": "window_start",
                  "window_end": "window_end"}, id="per_session")
            .sink(SINK))


#: Query name -> builder (keyword arguments: allowed_lateness_ms, name, parallelism,
#: source_parallelism).
QUERIES: dict[str, Callable[..., Dataflow]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q6": q6, "q7": q7, "q8": q8,
    "q11": q11,
}
#: Queries that keep no state by event time: late events go through them.
STATELESS = ("q0", "q1", "q2")
#: Where the JSON specs live (`write_specs`).
SPECS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "specs")


def spec_json(query: str) -> str:
    """The JSON spec of a query with its defaults, as `specs/<query>.json` holds it."""
    return QUERIES[query]().spec.to_json(indent=2) + "\n"


def write_specs(directory: str = SPECS_DIR) -> list[str]:
    """Write every query's JSON spec to `directory`/<query>.json; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for query in QUERIES:
        path = os.path.join(directory, f"{query}.json")
        with open(path, "w") as f:
            f.write(spec_json(query))
        paths.append(path)
    return paths


def read_spec(query: str, directory: str = SPECS_DIR) -> dict[str, object]:
    """A query's JSON spec as written in `directory` (a dict)."""
    with open(os.path.join(directory, f"{query}.json")) as f:
        loaded: dict[str, object] = json.load(f)
    return loaded
