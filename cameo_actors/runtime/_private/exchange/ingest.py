"""Ingest batches on the wire: every event either enters or is refused, never half.

A client packs its events before it takes the executor's sequence number
(`Runtime._send`), so an event msgpack cannot carry (an int beyond 64 bits, a
Decimal or a datetime, text with a lone surrogate, nesting beyond
`MAX_EVENT_DEPTH`) can no longer lose a sequence number and wedge the
executor's in-order delivery. Such an event becomes an error record of the
source (kind "unencodable") that travels in the same call as the good events
of its batch, as the third kind of item of an ingest call:

- a list: events;
- a number: a watermark;
- a map {"errors": [[step, kind, message, event], ...]}: error records;
- an Arrow record batch (msgpack's extension `wire.ARROW`): events as columns.

The fast path is one `msgpack.packb` of the whole batch; events are packed one
by one only when that fails. On the executor, `unpack_ingest` never fails
either: msgpack packs a few things it cannot read back (a tuple as a dict
key); those events become error records there.

Pure: no Ray.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, cast

import msgpack

from cameo_actors.operators.base import ErrorRecord, short_repr
from cameo_actors.operators.stateless import INT_RANGE
from cameo_actors.runtime._private.exchange.wire import columns_item, pack_events, unpack_events
from cameo_actors.runtime.boundary import Rejected

#: Levels of containers an event may nest, the event object being the first:
#: {"a": 1} has one, {"a": [1]} two. serde_json's default limit; Ray's pickling
#: of result rows and Python's recursion limit stay far away.
MAX_EVENT_DEPTH = 128
#: Containers msgpack's packer allows around any value (tests/unit/test_ingest.py checks it).
MSGPACK_NESTING = 1024
#: Containers around an event in an ingest call: the items, the batch.
_ABOVE_EVENT = 2
#: The kind of the error records of events refused at the edge.
UNENCODABLE = "unencodable"
_CARRIED = "JSON-like data: None, bool, int, float, str, bytes, and lists and dicts of them"


@dataclass(frozen=True, slots=True)
class Packed:
    """One ingest call's bytes, and the events of it refused (also error records in it)."""

    blob: bytes
    rejected: list[Rejected]


def pack_ingest(source: str, events: list[Any], first_index: int = 0) -> Packed:
    """Pack a batch of events for `source`: the events msgpack can carry, and an
    error record for each one it cannot.

    Args:
        source: the source step's id (the records' step).
        events: the batch.
        first_index: the position of events[0] in what the caller pushed (named in
            the records and in `Packed.rejected`).

    >>> p = pack_ingest("logs", [{"v": 1}, {"v": 2**70}, {"v": 3}])
    >>> [r["index"] for r in p.rejected], [r["field"] for r in p.rejected]
    ([1], ['v'])
    >>> items = unpack_ingest(p.blob, "logs")
    >>> items[0], items[1]["errors"][0][:2]
    ([{'v': 1}, {'v': 3}], ['logs', 'unencodable'])
    """
    try:
        return Packed(_packb_capped([events], _ABOVE_EVENT), [])
    except (TypeError, ValueError, OverflowError):
        pass  # some event cannot be carried: find which, below
    good: list[Any] = []
    records: list[list[Any]] = []
    rejected: list[Rejected] = []
    for i, e in enumerate(events, first_index):
        problem = _problem(e, MAX_EVENT_DEPTH)
        if problem is None:
            good.append(e)
            continue
        field, reason = _explain(e, problem)
        rejected.append({"index": i, "field": field, "reason": reason})
        records.append([source, UNENCODABLE, f"event {i} of the push: {reason}", _stand_in(e)])
    items: list[Any] = [good] if good else []
    items.append({"errors": records})
    return Packed(_packb_capped(items, _ABOVE_EVENT), rejected)


def pack_columns(batch: Any) -> bytes:
    """An ingest call of one columnar batch (an Arrow record batch, checked against the
    source's schema by `column_schema.conform`): its one item, read back as the batch."""
    return pack_events([columns_item(batch)])


def unpack_ingest(blob: bytes, step: str) -> list[Any]:
    """An ingest call's items; never raises, so the call's sequence number is never lost.
    An event msgpack packed but cannot read back becomes an error record of `step`."""
    try:
        return unpack_events(blob)
    except Exception:  # msgpack raises several unrelated types; sorted out below
        pass
    try:
        return _salvage(blob, step)
    except Exception as exc:  # not made by pack_ingest: say so, and keep the order going
        return [{"errors": [[step, UNENCODABLE, f"an ingest call of {len(blob)} bytes could not "
                             f"be read ({type(exc).__name__}: {exc}); its events are lost. Fix: "
                             "push through Runtime.push, which packs events one by one when "
                             "needed", None]]}]


def error_records(item: dict[str, Any]) -> list[ErrorRecord]:
    """The error records of an ingest call's map item."""
    return [ErrorRecord(step, kind, message, event) for step, kind, message, event in item["errors"]]


# -- packing ----------------------------------------------------------------------------------
class _Padding(threading.local):
    """Chains of single-element lists, one per thread and length, reused across calls."""

    def __init__(self) -> None:
        self.chains: dict[int, tuple[list[Any], list[Any]]] = {}

    def chain(self, n: int) -> tuple[list[Any], list[Any]]:
        """(outermost list, innermost list) of n nested lists, the innermost empty."""
        got = self.chains.get(n)
        if got is None:
            outer: list[Any] = []
            inner = outer
            for _ in range(n - 1):
                nxt: list[Any] = []
                inner.append(nxt)
                inner = nxt
            got = self.chains[n] = (outer, inner)
        return got


_padding = _Padding()


def _packb_capped(obj: Any, above: int) -> bytes:
    """msgpack of `obj`, refused (ValueError) when an event in it (`above` containers
    down: the items, the batch) nests deeper than MAX_EVENT_DEPTH.

    Packed plainly first: a value nests no deeper than the containers it holds, and each
    container's header begins with a byte of `_CONTAINER_BYTES`, so bytes with fewer of
    those than the limit cannot hold an event too deep (a batch of a few events: no
    further check). Else msgpack's packer, which has a fixed nesting limit and no option
    to lower it, packs `obj` inside enough single-element lists that its own limit
    becomes ours; each of those lists is one byte (0x91) at the head of the result, cut
    off. One packb in C instead of a walk over every event in Python, but ~100 us for
    the padding alone, where a plain packb of a few events takes 2."""
    try:
        plain = cast(bytes, msgpack.packb(obj, use_bin_type=True))
        if len(plain.translate(None, _OTHER_BYTES)) <= above + MAX_EVENT_DEPTH:
            return plain
    except (TypeError, ValueError, OverflowError):
        pass  # the padded packb below says why, as it would have
    pad = MSGPACK_NESTING - above - MAX_EVENT_DEPTH
    outer, inner = _padding.chain(pad)
    inner.append(obj)
    try:
        return cast(bytes, msgpack.packb(outer, use_bin_type=True))[pad:]
    finally:
        inner.pop()


#: The first bytes of msgpack's container headers (fixmap, fixarray, array 16/32, map
#: 16/32), and every other byte (what `_packb_capped` deletes to count the first).
_CONTAINER_BYTES = bytes([*range(0x80, 0xa0), *range(0xdc, 0xe0)])
_OTHER_BYTES = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)


def _problem(value: Any, levels: int) -> tuple[str, str] | None:
    """Why msgpack cannot carry `value` (nesting at most `levels` deep): (what, detail)."""
    try:
        msgpack.packb(value, use_bin_type=True)
    except OverflowError:
        return "int", ""
    except UnicodeEncodeError as exc:
        return "text", str(exc)
    except ValueError as exc:  # msgpack's own nesting limit, or a value too large
        return ("depth", "") if "recursion" in str(exc) else ("type", str(exc))
    except TypeError as exc:
        return "type", str(exc)
    if _deeper_than(value, levels):
        return "depth", ""
    return None


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether some value inside `value` sits inside more than `levels` containers
    (counting `value` itself), as msgpack counts them. Stops at levels + 1."""
    if isinstance(value, dict):
        children: Any = itertools.chain(value.keys(), value.values())
    elif isinstance(value, (list, tuple)):
        children = value
    else:
        return False
    if not value:
        return False
    if levels <= 0:
        return True
    return any(_deeper_than(c, levels - 1) for c in children)


def _explain(event: Any, problem: tuple[str, str]) -> tuple[str | None, str]:
    """(the field at fault, why) of an event msgpack cannot carry."""
    field: str | None = None
    value = event
    if isinstance(event, dict):
        for k, v in event.items():
            key_problem = _problem(k, MAX_EVENT_DEPTH - 1)
            found = key_problem or _problem(v, MAX_EVENT_DEPTH - 1)
            if found is not None:
                field = k if key_problem is None and type(k) is str else short_repr(k)
                value, problem = (k if key_problem else v), found
                break
    what, detail = problem
    where = f"field {field!r}: " if field is not None else ""
    got = f"{type(value).__name__} {short_repr(value)}"
    if what == "int":
        text = (f"expected {INT_RANGE}, got {got}. Fix: send it as text (a str field), or "
                "scale it down")
    elif what == "depth":
        text = (f"expected at most {MAX_EVENT_DEPTH} levels of nesting, got {got} nested deeper. "
                "Fix: flatten it, or send it as a JSON string")
    elif what == "text":
        text = (f"expected text that is valid UTF-8, got {got} ({detail}). Fix: replace lone "
                "surrogates (e.g. text.encode('utf-8', 'replace').decode())")
    else:
        text = (f"expected {_CARRIED}, got {got} ({detail}). Fix: convert it before pushing "
                "(a Decimal to float or str, a datetime to epoch ms or ISO text)")
    return field, where + text


def _stand_in(event: Any) -> Any:
    """What the error record keeps of a refused event: its plain scalar fields as they
    are, anything else as a short repr (so the record itself always packs)."""
    if not isinstance(event, dict):
        return short_repr(event)
    return {(k if _plain(k) and type(k) is str else short_repr(k)): (v if _plain(v) else short_repr(v))
            for k, v in event.items()}


def _plain(v: Any) -> bool:
    return v is None or (type(v) in (bool, int, float, str) and _problem(v, 0) is None)


# -- unpacking --------------------------------------------------------------------------------
_ARRAY_HEADS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def _salvage(blob: bytes, step: str) -> list[Any]:
    """The items of a blob that msgpack could not read as a whole: each event read on
    its own (skipped over, then decoded), the unreadable ones as error records."""
    up = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(blob), 1))
    up.feed(blob)
    items: list[Any] = []
    records: list[list[Any]] = []
    for _ in range(up.read_array_header()):
        start = up.tell()
        if blob[start] not in _ARRAY_HEADS:  # a watermark or error records: pack_ingest's own
            up.skip()
            items.append(unpack_events(blob[start:up.tell()]))
            continue
        events: list[Any] = []
        for i in range(up.read_array_header()):
            first = up.tell()
            up.skip()
            raw = blob[first:up.tell()]
            try:
                events.append(unpack_events(raw))
            except Exception as exc:  # e.g. a list as a dict key (a tuple where it was packed)
                shown = msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=False)
                records.append([step, UNENCODABLE, f"event {i} of an ingest call: expected dict keys "
                                f"that are text, numbers, booleans or None, got "
                                f"{short_repr(shown)} ({type(exc).__name__}: {exc}). Fix: use "
                                "text keys (e.g. join a tuple into one string)", short_repr(shown)])
        items.append(events)
    if records:
        items.append({"errors": records})
    return items
