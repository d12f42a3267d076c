"""A seeded generator of the Nexmark person / auction / bid stream.

It follows the reference Nexmark generator (nexmark/nexmark's `nexmark-flink`
generator, itself Apache Beam's): the same proportions, ids, "hot" ratios,
event times, auction lengths, prices, strings, channels and urls, drawn from
Python's `random.Random(seed)` (so the values are not the Java generator's,
but their distributions are). The code is our own.

The stream
----------
Events are numbered 0, 1, 2, ... Per 50 events (`person_proportion` +
`auction_proportion` + `bid_proportion` = 1 + 3 + 46) the first is a person,
the next three auctions, the other 46 bids. Event ``i`` happens at
``base_time_ms + floor(i * 1000 / rate_eps)``: `rate_eps` is events per second
of *event time*, not how fast anything is sent.

- **person** ``id`` counts from 1000 (`FIRST_PERSON_ID`); a name, an e-mail
  address, a credit card, a US city and a state (one of AZ CA ID OR WA WY).
- **auction** ``id`` counts from 1000; ``seller`` is a hot seller (the first
  of the latest 100 persons) with probability ``1 - 1/hot_sellers_ratio``,
  else one of the latest `num_active_people` persons; ``category`` is one of
  10..14; ``initial_bid`` a price, ``reserve`` the initial bid plus a price;
  it ``expires`` after a random length averaging the time in which
  `num_in_flight_auctions` more auctions are created.
- **bid** on a hot auction (the first of the latest 100) with probability
  ``1 - 1/hot_auction_ratio``, else one of the latest `num_in_flight_auctions`
  auctions (or up to 10 not created yet, as in the reference); by a hot bidder
  (the second of the latest 100 persons) with probability
  ``1 - 1/hot_bidders_ratio``, else an active person (or up to 10 not created
  yet). ``price`` is ``round(10 ** (6u) * 100)`` for u uniform in [0, 1)
  (cents: 1.00 to 1,000,000.00). ``channel`` is one of Google, Facebook,
  Baidu, Apple with its url 99 times in 100, else ``channel-N`` (N < 10,000)
  with a random url, mostly with a ``channel_id`` parameter.
- ``extra`` pads each event to an average size (200, 500, 100 bytes).

One deviation, on purpose: a seller is always a person created *before* the
auction (the reference may pick one of the next 10 persons too), so an
auction always joins a person at or before its own time (Q3's interval join
looks forward from the person only).

Events are flat dicts of one schema for the union stream (`SCHEMA`): a
``kind`` ("person", "auction" or "bid"), ``date_time`` (int ms of event time)
and that kind's fields; the other kinds' fields are absent (the source types
them nullable, so they read as None).

Delivery order: bounded disorder and late events
------------------------------------------------
`generate` returns the events in the order they are to be *delivered*:

- **Bounded disorder.** Each on-time event is delivered at its event time plus
  a delay drawn uniformly from ``[0, max_disorder_ms)``; events go out in
  delivery-time order. So an event is never more than `max_disorder_ms` older
  than the newest event delivered before it, and with
  ``max_disorder_ms <= allowed_lateness_ms`` (the source's) no on-time event is
  ever behind the watermark, whatever the batching.
- **Late events.** A share `late_share` of the events (each with that
  probability) is held back: such an event is delivered right after the first
  on-time event whose time is at least ``late_by_ms + allowed_lateness_ms``
  past its own. It is then behind the watermark by at least `late_by_ms` minus
  the event time one batch spans, so it is late for every operator of the
  queries (windows of at most 10 s) as long as a batch spans less than
  ``late_by_ms - 10 s`` of event time: whether an event is late does not
  depend on how the stream is cut into batches. An event the stream never
  gets that far past stays on time. `NexmarkStream.late` names the late ones.
  (An operator with two inputs, a join, has the lower of its inputs'
  watermarks; where one input's branch can run ahead of the other's, as on
  Ray, the skew between them must stay under the same margin too:
  tests/integration/test_nexmark.py drains every 1,000 events.)

Example:
    >>> s = generate(NexmarkConfig(events=100, seed=1))
    >>> [e["kind"] for e in s.events[:5]]
    ['person', 'auction', 'auction', 'auction', 'bid']
    >>> s.events[0]["id"], s.events[1]["id"], s.events[4]["auction"] >= 1000
    (1000, 1000, True)
    >>> s.counts()
    {'person': 2, 'auction': 6, 'bid': 92}
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from random import Random
from typing import Any

Event = dict[str, Any]

KINDS = ("person", "auction", "bid")
#: Ids start here, so that queries find matches even in small streams (as in the reference).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
#: Hot sellers, bidders and auctions are the first (bidders: second) of each batch of 100.
HOT_BATCH = 100
#: Ids up to this many ahead of the latest may be drawn for bids (not for sellers, see above).
ID_LEAD = 10
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_URLS = tuple(f"https://www.nexmark.com/{p}/item.htm?query=1"
                 for p in ("googl", "meta", "bidu", "aapl"))
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
             "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
#: 2023-11-14T22:13:20Z, a multiple of every window size of the queries.
BASE_TIME_MS = 1_700_000_000_000

#: The union stream's schema: fields that not every kind has are nullable.
SCHEMA: dict[str, str] = {
    "kind": "str",
    "date_time": "int",
    # person and auction
    "id": "int?",
    # person
    "name": "str?",
    "email_address": "str?",
    "credit_card": "str?",
    "city": "str?",
    "state": "str?",
    # auction
    "item_name": "str?",
    "description": "str?",
    "initial_bid": "int?",
    "reserve": "int?",
    "expires": "int?",
    "seller": "int?",
    "category": "int?",
    # bid
    "auction": "int?",
    "bidder": "int?",
    "price": "int?",
    "channel": "str?",
    "url": "str?",
    # every kind
    "extra": "str?",
}
#: Each kind's fields, in the order its events carry them.
FIELDS: dict[str, tuple[str, ...]] = {
    "person": ("id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra"),
    "auction": ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires",
                "seller", "category", "extra"),
    "bid": ("auction", "bidder", "price", "channel", "url", "date_time", "extra"),
}

_LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class NexmarkConfig:
    """What to generate. The defaults are the reference generator's.

    Attributes:
        events: how many events.
        seed: the seed; the same config always gives the same stream.
        rate_eps: events per second of event time (the reference's first event rate).
        base_time_ms: event time of the first event.
        person_proportion, auction_proportion, bid_proportion: kinds per
            (sum of the three) events.
        num_active_people: persons a non-hot seller or bidder is drawn from.
        num_in_flight_auctions: auctions a non-hot bid is drawn from; also sets the
            average auction length.
        hot_auction_ratio, hot_sellers_ratio, hot_bidders_ratio: a bid / auction goes
            to a hot auction / seller / bidder with probability 1 - 1/ratio.
        avg_person_bytes, avg_auction_bytes, avg_bid_bytes: average event sizes
            (``extra`` pads them).
        max_disorder_ms: events are delivered up to this much after their time, so out
            of order by less than this (see the module docstring); at most the source's
            `allowed_lateness_ms`.
        late_share: probability that an event is delivered late (held back).
        late_by_ms: a late event comes once the stream is this much plus
            `allowed_lateness_ms` past it.
        allowed_lateness_ms: the source's allowed lateness (the queries' default).
    """

    events: int = 100_000
    seed: int = 0
    rate_eps: float = 10_000.0
    base_time_ms: int = BASE_TIME_MS
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    num_active_people: int = 1000
    num_in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100
    max_disorder_ms: int = 0
    late_share: float = 0.0
    late_by_ms: int = 60_000
    allowed_lateness_ms: int = 2_000

    def __post_init__(self) -> None:
        def need(ok: bool, what: str, got: Any, fix: str) -> None:
            if not ok:
                raise ValueError(f"NexmarkConfig: expected {what}, got {got!r}; {fix}")

        need(isinstance(self.events, int) and self.events >= 0, "events >= 0", self.events,
             "pass a whole number of events")
        need(self.rate_eps > 0, "rate_eps > 0 (events per second of event time)", self.rate_eps,
             "pass a positive rate")
        for name in ("person_proportion", "auction_proportion", "bid_proportion",
                     "num_active_people", "num_in_flight_auctions", "hot_auction_ratio",
                     "hot_sellers_ratio", "hot_bidders_ratio"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} >= 1", value,
                 "pass a positive whole number")
        need(0 <= self.max_disorder_ms <= self.allowed_lateness_ms,
             "0 <= max_disorder_ms <= allowed_lateness_ms (disorder the watermark tolerates)",
             (self.max_disorder_ms, self.allowed_lateness_ms),
             "lower max_disorder_ms or raise allowed_lateness_ms")
        need(0.0 <= self.late_share < 1.0, "0 <= late_share < 1", self.late_share,
             "pass a small share such as 0.01")
        need(self.late_by_ms >= 0, "late_by_ms >= 0", self.late_by_ms,
             "pass how far behind (ms) late events come, e.g. 60000")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def time_of(self, number: int) -> int:
        """Event time (ms) of event number `number`."""
        return self.base_time_ms + int(number * 1000 // self.rate_eps)

    def kind_of(self, number: int) -> str:
        offset = number % self.total_proportion
        if offset < self.person_proportion:
            return "person"
        if offset < self.person_proportion + self.auction_proportion:
            return "auction"
        return "bid"


@dataclass(frozen=True)
class NexmarkStream:
    """Generated events in delivery order (see the module docstring).

    Attributes:
        config: what made them.
        events: the events, in the order to deliver them.
        late: positions in `events` of the events delivered late.
    """

    config: NexmarkConfig
    events: list[Event]
    late: frozenset[int] = field(default_factory=frozenset)

    def on_time(self) -> list[Event]:
        """The events that are not late, in delivery order."""
        late = self.late
        return [e for i, e in enumerate(self.events) if i not in late]

    def late_events(self) -> list[Event]:
        return [self.events[i] for i in sorted(self.late)]

    def counts(self) -> dict[str, int]:
        """Events per kind."""
        c = Counter(e["kind"] for e in self.events)
        return {k: c[k] for k in KINDS}


def generate(config: NexmarkConfig | None = None, **overrides: Any) -> NexmarkStream:
    """Generate a stream: `generate(NexmarkConfig(...))` or `generate(events=1000, seed=3)`."""
    if config is None:
        config = NexmarkConfig(**overrides)
    elif overrides:
        raise TypeError("generate: pass a NexmarkConfig or keyword arguments, not both")
    gen = _Generator(config)
    events = [gen.event(i) for i in range(config.events)]
    return _deliver(config, events)


def events_in_time_order(config: NexmarkConfig) -> list[Event]:
    """The events in event-number (and time) order, without disorder or late events."""
    return list(in_time_order(config))


def in_time_order(config: NexmarkConfig) -> Iterator[Event]:
    """`events_in_time_order`, made one at a time (a long feed need not hold them all)."""
    gen = _Generator(config)
    return (gen.event(i) for i in range(config.events))


class _Generator:
    """Makes event number i; draws from one Random, so events must be made in order."""

    def __init__(self, config: NexmarkConfig) -> None:
        self.c = config
        self.rng = Random(config.seed)
        self._channels: dict[int, tuple[str, str]] = {}

    def event(self, number: int) -> Event:
        t = self.c.time_of(number)
        kind = self.c.kind_of(number)
        if kind == "person":
            return self._person(number, t)
        if kind == "auction":
            return self._auction(number, t)
        return self._bid(number, t)

    # -- ids -------------------------------------------------------------------------
    def _last_person(self, number: int) -> int:
        """The latest person id (base 0) at event `number`: its own if it is a person."""
        c = self.c
        epoch, offset = divmod(number, c.total_proportion)
        return epoch * c.person_proportion + min(offset, c.person_proportion - 1)

    def _last_auction(self, number: int) -> int:
        """The latest auction id (base 0) at event `number`: its own if it is an auction."""
        c = self.c
        epoch, offset = divmod(number, c.total_proportion)
        if offset < c.person_proportion:
            epoch, offset = epoch - 1, c.auction_proportion - 1
        elif offset >= c.person_proportion + c.auction_proportion:
            offset = c.auction_proportion - 1
        else:
            offset -= c.person_proportion
        return epoch * c.auction_proportion + offset

    def _active_person(self, number: int, lead: int) -> int:
        people = self._last_person(number) + 1
        active = min(people, self.c.num_active_people)
        return people - active + self.rng.randrange(active + lead)

    def _in_flight_auction(self, number: int) -> int:
        last = self._last_auction(number)
        first = max(last - self.c.num_in_flight_auctions, 0)
        return first + self.rng.randrange(last - first + 1 + ID_LEAD)

    # -- values ----------------------------------------------------------------------
    def _price(self) -> int:
        return int(10.0 ** (self.rng.random() * 6.0) * 100.0 + 0.5)

    def _string(self, max_length: int) -> str:
        rng = self.rng
        n = 3 + rng.randrange(max_length - 3)
        return "".join(" " if rng.randrange(13) == 0 else rng.choice(_LETTERS)
                       for _ in range(n)).strip()

    def _extra(self, size: int, average: int) -> str:
        if size > average:
            return ""
        want = average - size
        delta = round(want * 0.2)
        n = want - delta + (self.rng.randrange(2 * delta) if delta else 0)
        return "".join(self.rng.choices(_LETTERS, k=n))

    def _channel(self) -> tuple[str, str]:
        rng = self.rng
        number = rng.randrange(CHANNELS_NUMBER)
        if rng.randrange(HOT_BATCH) != 0:
            i = rng.randrange(len(HOT_CHANNELS))
            return HOT_CHANNELS[i], HOT_URLS[i]
        found = self._channels.get(number)
        if found is None:
            url = f"https://www.nexmark.com/{self._string(5)}/item.htm?query=1"
            if rng.randrange(10) != 0:  # mostly with a channel id (bits of N reversed)
                url += f"&channel_id={int(f'{number:032b}'[::-1], 2)}"
            found = self._channels[number] = (f"channel-{number}", url)
        return found

    # -- events ----------------------------------------------------------------------
    def _person(self, number: int, t: int) -> Event:
        rng = self.rng
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        email = f"{self._string(7)}@{self._string(5)}.com"
        card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
        city, state = rng.choice(US_CITIES), rng.choice(US_STATES)
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        return {"kind": "person", "id": self._last_person(number) + FIRST_PERSON_ID, "name": name,
                "email_address": email, "credit_card": card, "city": city, "state": state,
                "date_time": t, "extra": self._extra(size, self.c.avg_person_bytes)}

    def _auction(self, number: int, t: int) -> Event:
        c, rng = self.c, self.rng
        if rng.randrange(c.hot_sellers_ratio) > 0:
            seller = self._last_person(number) // HOT_BATCH * HOT_BATCH
        else:
            seller = self._active_person(number, lead=0)  # an existing person (see above)
        category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
        initial_bid = self._price()
        # Long enough on average for num_in_flight_auctions more auctions to be created.
        ahead = c.num_in_flight_auctions * c.total_proportion // c.auction_proportion
        horizon = c.time_of(number + ahead) - t
        expires = t + 1 + rng.randrange(max(2 * horizon, 1))
        name, description = self._string(20), self._string(100)
        reserve = initial_bid + self._price()
        size = 8 + len(name) + len(description) + 40
        return {"kind": "auction", "id": self._last_auction(number) + FIRST_AUCTION_ID,
                "item_name": name, "description": description, "initial_bid": initial_bid,
                "reserve": reserve, "date_time": t, "expires": expires,
                "seller": seller + FIRST_PERSON_ID, "category": category,
                "extra": self._extra(size, c.avg_auction_bytes)}

    def _bid(self, number: int, t: int) -> Event:
        c, rng = self.c, self.rng
        if rng.randrange(c.hot_auction_ratio) > 0:
            auction = self._last_auction(number) // HOT_BATCH * HOT_BATCH
        else:
            auction = self._in_flight_auction(number)
        if rng.randrange(c.hot_bidders_ratio) > 0:
            bidder = self._last_person(number) // HOT_BATCH * HOT_BATCH + 1
        else:
            bidder = self._active_person(number, lead=ID_LEAD)
        price = self._price()
        channel, url = self._channel()
        return {"kind": "bid", "auction": auction + FIRST_AUCTION_ID,
                "bidder": bidder + FIRST_PERSON_ID, "price": price, "channel": channel,
                "url": url, "date_time": t, "extra": self._extra(32, c.avg_bid_bytes)}


def _deliver(config: NexmarkConfig, events: list[Event]) -> NexmarkStream:
    """Put events (in number order) in delivery order: bounded disorder, late ones held
    back (see the module docstring). Draws from its own Random, so the events' contents
    do not depend on the disorder and late settings."""
    rng = Random(f"nexmark-delivery-{config.seed}")
    n = len(events)
    held = ([i for i in range(n) if rng.random() < config.late_share]
            if config.late_share > 0 else [])
    behind = config.late_by_ms + config.allowed_lateness_ms
    held_set = set(held)
    newest = max((events[i]["date_time"] for i in range(n) if i not in held_set), default=None)
    # A held event the stream never gets `behind` past stays on time.
    late = [i for i in held if newest is not None and events[i]["date_time"] + behind <= newest]
    late_set = set(late)
    disorder = config.max_disorder_ms
    on_time = [i for i in range(n) if i not in late_set]
    if disorder:
        due = {i: events[i]["date_time"] + rng.random() * disorder for i in on_time}
        on_time.sort(key=lambda i: (due[i], i))
    # Each late event right after the first on-time event at least `behind` past it.
    late.sort(key=lambda i: (events[i]["date_time"] + behind, i))
    out: list[Event] = []
    late_at: list[int] = []
    newest_seen = float("-inf")
    j = 0
    for i in on_time:
        out.append(events[i])
        newest_seen = max(newest_seen, events[i]["date_time"])
        while j < len(late) and events[late[j]]["date_time"] + behind <= newest_seen:
            late_at.append(len(out))
            out.append(events[late[j]])
            j += 1
    return NexmarkStream(config, out, frozenset(late_at))
