"""The bytes that travel between executors: batched messages and credit returns.

One Ray call carries everything one executor has for another: a link sequence
number (calls may be reordered by Ray; the receiver restores order), the
messages, and the credit returns with Cameo cost feedback for upstreams there.
"""

from __future__ import annotations

from typing import Any, cast

import msgpack

from cameo_actors.operators.column_ipc import from_ipc, to_ipc
from cameo_actors.operators.columns import is_columns
from cameo_actors.scheduling import Message, PriorityContext

#: The msgpack extension code of a columnar batch: an Arrow IPC stream of one batch.
ARROW = 1

#: (upstream activation, downstream activation, events consumed, downstream's path cost ms)
Ack = tuple[str, str, int, float]


#: Where the payload, the priority context (its dataflow first), the sending activation
#: and the events it counts are in an encoded message.
MSG_PAYLOAD, MSG_CONTEXT, MSG_UPSTREAM, MSG_SIZE = 3, 4, 5, 6


def packable(obj: Any) -> bool:
    """Whether msgpack can carry `obj` between executors."""
    try:
        msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def columns_item(batch: Any) -> msgpack.ExtType:
    """A columnar batch as msgpack carries it (read back as the batch by the unpackers here)."""
    return msgpack.ExtType(ARROW, to_ipc(batch))


def _ext(code: int, data: bytes) -> Any:
    if code == ARROW:
        return from_ipc(data)
    return msgpack.ExtType(code, data)


def encode_message(m: Message) -> tuple[Any, ...]:
    payload = columns_item(m.payload) if is_columns(m.payload) else m.payload
    return (m.target, m.port, m.is_watermark, payload, m.ctx.to_tuple(), m.upstream, m.size,
            m.sent_ms, m.generation, m.trace)


def decode_message(t: list[Any]) -> Message:
    target, port, is_wm, payload, ctx, upstream, size, sent, generation, trace = t
    return Message(target, port, payload, is_wm, PriorityContext.from_tuple(ctx), upstream, size,
                   sent_ms=sent, generation=generation, trace=trace)


#: A batch's header: (sender index, sender incarnation, receiver incarnation, link seq).
LinkHeader = tuple[int, str, str, int]


def pack_link(header: LinkHeader, messages: list[tuple[Any, ...]], acks: list[Ack]) -> bytes:
    return cast(bytes, msgpack.packb((*header, messages, acks), use_bin_type=True))


def unpack_link(blob: bytes) -> tuple[int, str, str, int, list[Any], list[Any]]:
    sender, sender_inc, to_inc, seq, messages, acks = msgpack.unpackb(
        blob, raw=False, strict_map_key=False, ext_hook=_ext)
    return sender, sender_inc, to_inc, seq, messages, acks


def pack_events(items: list[Any]) -> bytes:
    return cast(bytes, msgpack.packb(items, use_bin_type=True))


def unpack_events(blob: bytes) -> list[Any]:
    return cast(list[Any], msgpack.unpackb(blob, raw=False, strict_map_key=False, ext_hook=_ext))
