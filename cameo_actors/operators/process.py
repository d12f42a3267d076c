"""A keyed stateful user function with event-time timers (the `process` step).

The user writes a `KeyedProcess` class; the operator keeps, per key, a state
dict and a set of timers, and calls::

    on_event(state, event, ctx) -> events   # for each input event of the key
    on_timer(state, time, ctx) -> events    # when the watermark reaches a timer

`state` is the key's own dict (``{}`` at first), kept between calls; it holds
plain data msgpack carries (dicts, lists, str, int, float, bool, None, bytes;
tuples come back as lists after a checkpoint or a move). A key whose state is
empty and that has no timers is forgotten. ``ctx.key`` is the key,
``ctx.watermark`` the operator's watermark, ``ctx.set_timer(t)`` /
``ctx.cancel_timer(t)`` set and cancel an event-time timer of the key (the
same t twice is one timer), ``ctx.timers()`` lists them.

A call returns None, an event dict, or an iterable of event dicts. Timers fire
when the watermark rises (`advance_to`): every timer at or before it, in order
of time, then of key (by the msgpack bytes of the key), including timers that
`on_timer` sets at or before the watermark; their outputs come out before the
watermark. Two guards keep an advance finite: a timer that already fired in
this advance and is set again fires at the next one, and at the end of the
stream (an infinite watermark) a timer `on_timer` sets later than the one
firing stays pending (a timer that re-arms itself would never end).

On the rocksdb backend the states and timers live in a store with a cache of
hot keys (`stored_keys`, `process_timers`): a checkpoint is the store's files,
a restore opens them, and a bin moves as the store's bytes.

Bad records are data: with a `time_field`, an event without a valid time is
"malformed" and one behind the watermark "late"; an event whose key function
raises or returns an unhashable key is "malformed"; a call that raises or
returns something else than events sends its event (or ``{"timer": t, "key":
k}``) to the error output as "user_function", with the exception. What the
call changed in state before it raised stays.

>>> class Count(KeyedProcess):
...     def on_event(self, state, event, ctx):
...         state["n"] = state.get("n", 0) + 1
...         return {"user": ctx.key, "n": state["n"]}
>>> op = ProcessOperator("p", Count(), key_fn=lambda e: e["user"])
>>> op.on_batch([{"user": "a"}, {"user": "b"}, {"user": "a"}]).events
[{'user': 'a', 'n': 1}, {'user': 'b', 'n': 1}, {'user': 'a', 'n': 2}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack

from cameo_actors.errors import SpecError
from cameo_actors.operators.aggregates import is_time
from cameo_actors.operators.base import Event, Output, short_repr
from cameo_actors.operators.bins import KeyBins
from cameo_actors.operators.process_timers import StoredTimers, TimerHeap
from cameo_actors.operators.state_store import StateBackend, backend_folder
from cameo_actors.operators.stored_keys import StoredKeys, StoredState, StoreHome, stored_entries
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windowing import (
    KeyFn,
    decode_key,
    encode_key,
    event_time,
    time_error,
    unhashable_key_error,
)

__all__ = ["KeyedProcess", "ProcessContext", "ProcessOperator", "make_process"]

_INF = math.inf
#: What state may hold, as the fix of an error says it.
_PLAIN = ("keep only plain data in state: dicts, lists, str, int (64 bits), float, bool, "
          "None, bytes")


class ProcessContext:
    """What a `KeyedProcess` call knows besides its state and event: the key, the
    watermark, and the key's timers.

    Attributes:
        key: the key of the call (as the key expression returned it).
        watermark: the operator's watermark (-inf before the first one); in
            `on_timer`, the watermark being advanced to.
    """

    __slots__ = ("key", "watermark", "_op")

    def __init__(self, op: ProcessOperator) -> None:
        self._op = op
        self.key: Any = None
        self.watermark: float = -_INF

    def set_timer(self, time: float) -> None:
        """Call `on_timer` for this key once the watermark reaches `time` (event-time
        ms, a finite number, or math.inf: at the end of the stream); setting the same
        time twice is one timer."""
        self._op._set_timer(self.key, time)

    def cancel_timer(self, time: float) -> None:
        """Cancel this key's timer at `time` (nothing if there is none)."""
        self._op._cancel_timer(self.key, time)

    def timers(self) -> list[float]:
        """This key's pending timers, earliest first."""
        return sorted(self._op._timers.get(self.key, ()))


class KeyedProcess:
    """Base of a keyed stateful user function (a `process` step names the class by
    import path; each operator instance makes one with no arguments).

    Override `on_event`, and `on_timer` if it sets timers. Both return None, an
    event dict, or an iterable of event dicts, and may change `state`, the key's
    own dict, kept between calls (plain data only: it is saved by msgpack).

    Example: a running count per key, and the count of a key one second after
    its last event (an inactivity timer):

        >>> class LastCount(KeyedProcess):
        ...     def on_event(self, state, event, ctx):
        ...         state["n"] = state.get("n", 0) + 1
        ...         if "due" in state:
        ...             ctx.cancel_timer(state["due"])
        ...         state["due"] = event["ts"] + 1000
        ...         ctx.set_timer(state["due"])
        ...     def on_timer(self, state, time, ctx):
        ...         n = state["n"]
        ...         state.clear()  # forget the key
        ...         return [{"key": ctx.key, "ts": time, "n": n}]
        >>> op = ProcessOperator("p", LastCount(), key_fn=lambda e: e["k"], time_field="ts")
        >>> _ = op.on_batch([{"k": "a", "ts": 0}, {"k": "a", "ts": 500}, {"k": "b", "ts": 600}])
        >>> op.on_watermark(2000).events
        [{'key': 'a', 'ts': 1500, 'n': 2}, {'key': 'b', 'ts': 1600, 'n': 1}]
        >>> op.state_keys()
        []
    """

    def on_event(self, state: dict[str, Any], event: Event, ctx: ProcessContext
                 ) -> Iterable[Event] | Event | None:
        """One input event of key ``ctx.key``: returns the events to emit."""
        raise NotImplementedError(f"{type(self).__qualname__} must define on_event")

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext
                 ) -> Iterable[Event] | Event | None:
        """A timer of key ``ctx.key`` at `time` fired: returns the events to emit."""
        return None


def make_process(obj: Any, step_id: str, path: str) -> Any:
    """The user object a process step runs: `obj` (what `path` names) made with no
    arguments if it is a class; it must have an ``on_event`` method.

    Raises:
        SpecError: not a class with ``on_event``, or its constructor raised.
    """
    if not isinstance(obj, type):
        raise SpecError(step_id, "a KeyedProcess class (with on_event and on_timer)",
                        f"{type(obj).__name__} {path!r}",
                        "name a class, e.g. 'myjobs.fraud:RunningCount' subclassing "
                        "cameo_actors.KeyedProcess")
    try:
        inst = obj()
    except Exception as exc:
        raise SpecError(step_id, f"a class {path!r} that can be made with no arguments",
                        f"{type(exc).__name__}: {exc}",
                        "give every argument of __init__ a default") from exc
    if not callable(getattr(inst, "on_event", None)):
        raise SpecError(step_id, f"an on_event method on {path!r}", None,
                        "subclass cameo_actors.KeyedProcess and define on_event")
    return inst


#: The store's prefixes of a process's maps (`stored_keys`): states, each key's timers,
#: every timer in firing order.
STATES, TIMERS, DUE = b"s", b"t", b"u"


def _as_list(timers: set[Any]) -> list[Any]:
    return sorted(timers)


class ProcessOperator(WindowedOperator):
    """Runs a `KeyedProcess` per key: its state dicts and timers (see the module doc).

    Args:
        step_id: the spec step (named in every error record).
        process: the user object (``on_event``, optionally ``on_timer``).
        key_fn: event -> key (hashable; tuples allowed).
        time_field: the event-time field; None: events are never late.
        name: how errors name the user function (default: its class name).

    Attributes:
        user_function_count: calls sent to the error output as "user_function".
    """

    noun = "process"

    def __init__(self, step_id: str, process: Any, *, key_fn: KeyFn,
                 time_field: str | None = None, name: str | None = None) -> None:
        super().__init__(step_id)
        if not callable(getattr(process, "on_event", None)):
            raise ValueError(f"step {step_id!r}: process must have an on_event method, "
                             f"got {process!r}")
        if not callable(key_fn):
            raise ValueError(f"step {step_id!r}: a process needs a key function, got {key_fn!r}; "
                             "key_by before process")
        if time_field is not None and (not isinstance(time_field, str) or not time_field):
            raise ValueError(f"step {step_id!r}: time_field must name the event-time field or "
                             f"be None, got {time_field!r}")
        self._on_event = process.on_event
        self._on_timer = getattr(process, "on_timer", None)
        self.key_fn = key_fn
        self.time_field = time_field
        self.name = name or type(process).__qualname__
        self.user_function_count = 0
        self._ctx = ProcessContext(self)
        # key -> state, key -> its timers; on the rocksdb backend both in its store
        # (`_stored`, None in memory), where a changed value is set again to be written.
        self._states: dict[Any, dict[str, Any]] | StoredKeys = {}
        self._timers: dict[Any, set[Any]] | StoredKeys = {}
        self._stored: StoredState | None = None
        # In memory, the keys of `_states` and `_timers` by bin: a key is added when it
        # gets its first state or timer, discarded when it has neither left (a store's
        # key order has the bins).
        self._index = KeyBins()
        # Every timer set, in firing order; cancelled, fired or moved ones are stale:
        # `_timers` is the truth.
        self._queue: TimerHeap | StoredTimers = TimerHeap()
        # While timers fire: the watermark advanced to, the timer firing, what fired,
        # and the (time, key) to queue after the advance (see the module doc's guards).
        self._advancing: float | None = None
        self._firing: Any = None
        self._fired: set[tuple[Any, Any]] = set()
        self._deferred: dict[tuple[Any, Any], None] = {}

    # -- timers ------------------------------------------------------------------------
    def _set_timer(self, key: Any, t: Any) -> None:
        if not is_time(t) and t != _INF:
            raise TypeError(f"set_timer: expected a finite int or float time (ms), or "
                            f"math.inf for the end of the stream, got {type(t).__name__} "
                            f"{short_repr(t)}")
        timers = self._timers
        ts = timers.get(key)
        if ts is None:
            ts = timers[key] = set()
            if self._stored is None and key not in self._states:
                self._index.add(key)
        elif t in ts:
            return
        ts.add(t)
        if self._stored is not None:
            timers[key] = ts  # changed: written back
        adv = self._advancing
        if adv is not None and t <= adv and (
                (t, key) in self._fired or (adv == _INF and t > self._firing)):
            self._deferred[t, key] = None
        else:
            self._queue.push(t, key)

    def _cancel_timer(self, key: Any, t: Any) -> None:
        self._drop_timer(key, self._timers.get(key), t)

    def _drop_timer(self, key: Any, ts: set[Any] | None, t: Any) -> None:
        """`t` is no longer one of `key`'s timers `ts` (nothing if it was not)."""
        if ts is None or t not in ts:
            return
        ts.discard(t)
        timers = self._timers
        if ts:
            if self._stored is not None:
                timers[key] = ts
        else:
            del timers[key]
            if self._stored is None and key not in self._states:
                self._index.discard(key)

    # -- calls ---------------------------------------------------------------------------
    def _call(self, out: Output, k: Any, fn: Any, arg: Any, what: str, record: Any) -> None:
        """Call fn(state, arg, ctx) for key k; its events to `out`, its failures to the
        error output as `record`; keep the key's state if it is not empty."""
        states = self._states
        state = states.get(k)
        fresh = state is None
        if state is None:
            state = {}
        ctx = self._ctx
        ctx.key, ctx.watermark = k, self.watermark
        try:
            result = fn(state, arg, ctx)
            if result is None:
                produced: Any = ()
            elif isinstance(result, (dict, str, bytes)) or not hasattr(result, "__iter__"):
                produced = (result,)  # one event, or a wrong value reported below
            else:
                produced = list(result)
        except Exception as exc:  # user code: report, never crash the dataflow
            self._user_error(out, f"{self.name}.{what} raised {type(exc).__name__}: {exc}", record)
            produced = ()
        for r in produced:
            if isinstance(r, dict):
                out.events.append(r)
            else:
                self._user_error(out, f"{self.name}.{what} returned {type(r).__name__} "
                                      f"{short_repr(r)}, expected an event dict (or an iterable "
                                      "of them, or None)", record)
        in_memory = self._stored is None
        if state:
            if fresh or not in_memory:  # a stored state is written back once changed
                states[k] = state
                if fresh and in_memory and k not in self._timers:
                    self._index.add(k)
        elif not fresh:
            del states[k]
            if in_memory and k not in self._timers:
                self._index.discard(k)

    def _user_error(self, out: Output, message: str, record: Any) -> None:
        self.user_function_count += 1
        self.error(out, "user_function", message, record)

    # -- event processing --------------------------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        tf, key_fn, wm, rejects = self.time_field, self.key_fn, self.watermark, self.rejects
        on_event = self._on_event
        for ev in events:
            if tf is not None:
                t = event_time(ev, tf)
                if t is None:
                    rejects.malformed(out, ev, time_error(ev, tf))
                    continue
                if t < wm:
                    rejects.late(out, ev, f"event at {tf}={t} is behind the watermark {wm}")
                    continue
            try:
                k = key_fn(ev)
            except Exception as exc:
                rejects.key_raised(out, ev, exc)
                continue
            message = unhashable_key_error(k)
            if message is not None:
                rejects.malformed(out, ev, message)
                continue
            self._call(out, k, on_event, ev, "on_event", ev)

    def advance_to(self, watermark: float, out: Output) -> None:
        """Fire every timer at or before `watermark` (see the module doc)."""
        queue, timers, on_timer = self._queue, self._timers, self._on_timer
        first = queue.next_time()
        if first is None or first > watermark:
            return
        self._advancing, self._fired, self._deferred = watermark, set(), {}
        queue.begin(watermark)
        try:
            while (due := queue.pop_due()) is not None:
                t, k = due
                ts = timers.get(k)
                if ts is None or t not in ts or (t, k) in self._deferred:
                    # cancelled, moved away, a second entry of a fired one, or an entry
                    # left by a cancelled one of a timer set again and deferred
                    continue
                self._drop_timer(k, ts, t)
                self._fired.add((t, k))
                self._firing = t
                if on_timer is not None:
                    self._call(out, k, on_timer, t, "on_timer", {"timer": t, "key": encode_key(k)})
        finally:
            queue.end()
            for t, k in self._deferred:
                queue.push(t, k)
            self._advancing, self._firing, self._fired, self._deferred = None, None, set(), {}

    # -- state -------------------------------------------------------------------------
    def _config(self) -> list[Any]:
        return ["process", self.name, self.time_field]

    def _pack(self, k: Any, state: dict[str, Any]) -> bytes:
        """A key's state as msgpack bytes, checked to come back (a copy, too)."""
        try:
            blob: bytes = msgpack.packb(state, use_bin_type=True)
            msgpack.unpackb(blob, raw=False, strict_map_key=False)
        except Exception as exc:
            raise ValueError(f"step {self.step_id!r}: the state of key {k!r} cannot be saved "
                             f"({type(exc).__name__}: {exc}); {self.name} must {_PLAIN} "
                             "(tuples come back as lists)") from exc
        return blob

    def _rows(self, keys: Iterable[Any]) -> list[Any]:
        """Rows ``[key, state as msgpack bytes or None, [timer, ...]]``, keys encoded."""
        return list(self._each_row(keys))

    def _each_row(self, keys: Iterable[Any]) -> Iterator[list[Any]]:
        states, timers = self._states, self._timers
        for k in keys:
            state, ts = states.get(k), timers.get(k)
            if state is None and ts is None:
                continue
            yield [encode_key(k), None if state is None else self._pack(k, state),
                   sorted(ts) if ts else []]

    def _snapshot_windows(self) -> dict[str, Any]:
        return {"keys": self._each_row(self.state_keys()),
                "user_function_count": self.user_function_count}

    def _cut_fields(self) -> dict[str, Any]:
        """A checkpoint's rows: none with a store (its files are the part)."""
        if self._stored is None:
            return self._snapshot_windows()
        return {"keys": iter(()), "user_function_count": self.user_function_count}

    def _stored_state(self) -> StoredState | None:
        return self._stored

    def _restore_windows(self, state: dict[str, Any]) -> None:
        self.user_function_count = state["user_function_count"]
        files = state.get("stored") or []
        if self._stored is not None:
            self._stored.restore(files)
        else:
            self._states, self._timers = {}, {}
            self._queue.clear()
            self._index.clear()
            if files:  # a store's checkpoint, restored in memory (the pool changed backend)
                states, listed = stored_entries(files, backend_folder(None), STATES, TIMERS)
                timers = dict(listed)
                self._load([[encode_key(k), blob, msgpack.unpackb(timers.pop(k, b"\x90"))]
                            for k, blob in states])
                self._load([[encode_key(k), None, msgpack.unpackb(blob)]
                            for k, blob in timers.items()])
        self._load(state["keys"])

    def _load(self, rows: list[Any]) -> None:
        states = self._states
        stored = isinstance(states, StoredKeys)
        if isinstance(states, StoredKeys):  # the states' bytes as they are (typed apart)
            states.put_packed((decode_key(k), blob) for k, blob, _ in rows if blob is not None)
        for k_data, blob, ts in rows:
            k = decode_key(k_data)
            if blob is not None and not stored:
                states[k] = msgpack.unpackb(blob, raw=False, strict_map_key=False)
                self._index.add(k)
            for t in ts:
                self._set_timer(k, t)  # indexes a key with timers only

    def state_keys(self) -> list[Any]:
        states = self._states
        return [*states, *(k for k in self._timers if k not in states)]

    def _use_bins(self, bins: int, backend: StateBackend) -> None:
        self._index = KeyBins(bins)
        if not backend.stored:
            self._stored, self._states, self._timers = None, {}, {}
            self._queue = TimerHeap()
            return
        home = StoreHome(backend)
        self._states = StoredKeys(bins, home, STATES)
        self._timers = StoredKeys(bins, home, TIMERS, encode=_as_list, decode=set)
        self._queue = queue = StoredTimers(home, DUE)
        self._stored = StoredState(home, [self._states, self._timers], [queue])

    def state_bins(self) -> list[int]:
        states, timers = self._states, self._timers
        if isinstance(states, StoredKeys) and isinstance(timers, StoredKeys):
            return sorted({*states.bins(), *timers.bins()})
        return self._index.bins()

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows ``[key, state, timers]`` per key with state or timers: the state as
        msgpack bytes (None when empty), the timers sorted; keys encoded with
        `encode_key`; and how many keys.

        Raises:
            ValueError: a key's state is not plain data (nothing is taken then).
        """
        bins = list(bins)
        states, timers = self._states, self._timers
        if isinstance(states, StoredKeys) and isinstance(timers, StoredKeys):
            # The store's bytes as they are; the queue's entries of the keys are stale now.
            taken = dict(states.take(bins))
            moved = {k: msgpack.unpackb(blob) for k, blob in timers.take(bins)}
            rows = [[encode_key(k), blob, moved.pop(k, [])] for k, blob in taken.items()]
            rows += [[encode_key(k), None, ts] for k, ts in moved.items()]
            return rows, len(rows)
        by_bin = self._index.keys
        keys = [k for b in bins for k in by_bin.get(b, ())]
        rows = self._rows(keys)  # raises before anything is taken
        self._index.take(bins)
        for k in keys:
            states.pop(k, None)
            timers.pop(k, None)  # its queue entries are stale now
        return rows, len(rows)

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        # `owned` changes nothing: a state comes out of its msgpack bytes a new dict.
        seen: set[Any] = set()
        for row in rows:  # check everything first: all or nothing
            if not isinstance(row, list) or len(row) != 3:
                raise ValueError(f"not a process state row: {short_repr(row)}")
            k = decode_key(row[0])
            if k in self._states or k in self._timers or k in seen:
                raise ValueError(f"key {k!r} already has state here")
            seen.add(k)
        self._load(rows)
