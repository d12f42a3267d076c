"""The user functions the Nexmark queries reference by import path.

- `WinningBids` (q4, q6, stage 1): keyed by auction id over auctions and bids; the
  closing price of each auction.
- `CategoryAverage` (q4) and `SellerAverage` (q6), stage 2: running averages of
  closing prices, emitted in (date_time, auction) order.
- `hot_items` (q5) and `highest_bids` (q7): one row per event a `max_by` kept.

State is plain msgpack-able data (lists, numbers), one dict per key.

Example (stage 1 alone, driven by hand):
    >>> from types import SimpleNamespace
    >>> timers = []
    >>> ctx = SimpleNamespace(key=1000, watermark=0, set_timer=timers.append,
    ...                       cancel_timer=timers.remove)
    >>> p, state = WinningBids(), {}
    >>> p.on_event(state, {"kind": "bid", "auction": 1000, "price": 7, "date_time": 15}, ctx)
    >>> p.on_event(state, {"kind": "auction", "id": 1000, "date_time": 10, "expires": 20,
    ...                    "seller": 1001, "category": 10}, ctx)
    >>> p.on_event(state, {"kind": "bid", "auction": 1000, "price": 9, "date_time": 25}, ctx)
    >>> sorted(timers), p.on_timer(state, 21, ctx), state
    ([16, 21], [{'auction': 1000, 'seller': 1001, 'category': 10, 'price': 7, 'date_time': 20}], {})
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cameo_actors.nexmark.queries import Q6_LAST
from cameo_actors.operators.process import KeyedProcess

Event = dict[str, Any]


class WinningBids(KeyedProcess):
    """The closing price of each auction: its highest bid with a time within
    ``[auction date_time, expires]``, emitted once the watermark passes ``expires`` as
    ``{auction, seller, category, price, date_time: expires}`` (nothing without a bid).

    Input: auctions and bids keyed by auction id. A bid may come before its auction
    (disorder, or a bid on an auction not created yet): it waits in ``pending`` until the
    watermark passes its time; by then an auction it could belong to would be late.

    State: ``auction`` [date_time, expires, seller, category], ``best`` price or None;
    ``pending`` [[date_time, price], ...] while the auction is unknown.
    """

    def on_event(self, state: dict[str, Any], event: Event, ctx: Any) -> Iterable[Event] | None:
        t = event["date_time"]
        if event["kind"] == "auction":
            expires = event["expires"]
            best = None
            for bid_time, price in state.pop("pending", ()):
                if t <= bid_time <= expires and (best is None or price > best):
                    best = price
            state["auction"] = [t, expires, event["seller"], event["category"]]
            state["best"] = best
            # At expires + 1 no bid at expires can come any more (it would be late).
            ctx.set_timer(expires + 1)
            return None
        auction = state.get("auction")
        price = event["price"]
        if auction is None:
            state.setdefault("pending", []).append([t, price])
            ctx.set_timer(t + 1)
        elif auction[0] <= t <= auction[1]:
            best = state["best"]
            if best is None or price > best:
                state["best"] = price
        return None

    def on_timer(self, state: dict[str, Any], time: float, ctx: Any) -> Iterable[Event] | None:
        auction = state.get("auction")
        if auction is not None:
            if time != auction[1] + 1:
                return None  # a timer of a bid that was pending before the auction came
            best = state["best"]
            state.clear()
            if best is None:
                return None
            return [{"auction": ctx.key, "seller": auction[2], "category": auction[3],
                     "price": best, "date_time": auction[1]}]
        # No auction yet: bids it could no longer belong to are dropped.
        pending = [p for p in state.get("pending", ()) if p[0] >= time]
        if pending:
            state["pending"] = pending
        else:
            state.clear()
        return None


class _ClosingsInOrder(KeyedProcess):
    """Buffers closings (``{auction, price, date_time}``) and handles them in
    (date_time, auction) order once the watermark passes their time, so that results do
    not depend on the order closings arrive in (from several upstream instances)."""

    def on_event(self, state: dict[str, Any], event: Event, ctx: Any) -> Iterable[Event] | None:
        t = event["date_time"]
        state.setdefault("buffer", []).append([t, event["auction"], event["price"]])
        # At t + 1 every closing at t has come: each upstream emits it before its
        # watermark passes t.
        ctx.set_timer(t + 1)
        return None

    def on_timer(self, state: dict[str, Any], time: float, ctx: Any) -> Iterable[Event] | None:
        buffer = state.get("buffer", [])
        due = sorted(c for c in buffer if c[0] < time)
        rest = [c for c in buffer if c[0] >= time]
        if rest:
            state["buffer"] = rest
        else:
            state.pop("buffer", None)
        return [self.closed(state, t, auction, price, ctx.key) for t, auction, price in due]

    def closed(self, state: dict[str, Any], t: int, auction: int, price: int, key: Any) -> Event:
        raise NotImplementedError


class CategoryAverage(_ClosingsInOrder):
    """Q4: per category, the average closing price of all its closed auctions so far,
    ``{category, date_time, auction, price, avg_price}`` at each closing."""

    def closed(self, state: dict[str, Any], t: int, auction: int, price: int, key: Any) -> Event:
        n = state["n"] = state.get("n", 0) + 1
        total = state["total"] = state.get("total", 0) + price
        return {"category": key, "date_time": t, "auction": auction, "price": price,
                "avg_price": total / n}


class SellerAverage(_ClosingsInOrder):
    """Q6: per seller, the average closing price of its last 10 closed auctions,
    ``{seller, date_time, auction, price, avg_price}`` at each closing."""

    last = Q6_LAST

    def closed(self, state: dict[str, Any], t: int, auction: int, price: int, key: Any) -> Event:
        prices = state.get("prices", [])[-(self.last - 1):] + [price]
        state["prices"] = prices
        return {"seller": key, "date_time": t, "auction": auction, "price": price,
                "avg_price": sum(prices) / len(prices)}


def hot_items(result: Event) -> list[Event]:
    """Q5: the auctions a window's ``max_by("n")`` kept (``hot``), one row each."""
    return [{"auction": r["key"], "n": r["n"], "window_start": r["window_start"],
             "window_end": r["window_end"]} for r in result["hot"]]


def highest_bids(result: Event) -> list[Event]:
    """Q7: the bids a window's ``max_by("price")`` kept (``top``), one row each."""
    return [{"auction": b["auction"], "bidder": b["bidder"], "price": b["price"],
             "date_time": b["date_time"], "window_end": result["window_end"]}
            for b in result["top"]]
