"""User functions referenced by import path in test specs ('tests.udfs:fn')."""

from __future__ import annotations

from typing import Any

from cameo_actors import KeyedProcess
from cameo_actors.operators.process import ProcessContext


def split_words(e: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"ts": e["ts"], "word": w} for w in e["text"].split()]


def double(e: dict[str, Any]) -> dict[str, Any]:
    if e["value"] < 0:
        raise ValueError("negative value")
    return {**e, "value": e["value"] * 2}


def not_a_dict(e: dict[str, Any]) -> int:
    return 1


def log_line(e: dict[str, Any]) -> dict[str, Any]:
    """A Kafka record read whole as text (`_value`) as a log event: its level and its host
    (the record's key), its time kept (the record's timestamp, the source's event time)."""
    return {"level": e["_value"].split(" ", 1)[0], "host": e["_key"],
            "_timestamp": e["_timestamp"]}


def with_record(e: dict[str, Any]) -> dict[str, Any]:
    """An event read from Kafka with its record's fields, renamed for the steps after (a
    name starting with `_` is not for expressions)."""
    return {**{k: v for k, v in e.items() if not k.startswith("_")}, "rkey": e["_key"],
            "part": e["_partition"], "offset": e["_offset"], "rts": e["_timestamp"]}


class BucketCount(KeyedProcess):
    """Counts per key and 50 ms bucket, emitted by a timer at the bucket's end: a
    tumbling count written as a process (its results do not depend on batching)."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        start = event["ts"] - event["ts"] % 50
        state[str(start)] = state.get(str(start), 0) + 1
        ctx.set_timer(start + 50)

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        start = int(time) - 50
        return {"key": ctx.key, "ts": start + 49, "start": start, "n": state.pop(str(start))}
