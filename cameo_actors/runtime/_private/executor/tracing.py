"""Tracing on the executor's worker thread: activities into a ring (SnailTrail's traces).

What is recorded, and why it is cheap enough to leave on: one tuple per message an
activation runs (`PROCESS`), and one per batch packed for or unpacked from another
executor (`SERIALIZE`, `DESERIALIZE`), appended to a bounded deque on the thread
that already owns all the executor's state (no lock). A message's story travels with
it: `Message.trace` names the activity that sent it, so the analysis can join a send
to its receive and an upstream message to what it produced.

Sampling bounds the cost at high rates: a share `trace_sample` of the messages from
clients is traced, and everything they cause downstream with them (a path is traced
whole or not at all). The controller collects the rings every snapshot interval
(`drain`); activities it does not collect in time are overwritten, oldest first, and
counted as `lost`.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from cameo_actors.scheduling import Message
from cameo_actors.tracing.records import PROCESS, trace_id

#: (results written, of them within target, when writing them started, the target)
Egressed = tuple[int, int, float, float]


class Tracer:
    def __init__(self, executor: int, sample: float, capacity: int) -> None:
        self.executor = executor
        self.sample = sample
        self.ring: deque[tuple[Any, ...]] = deque(maxlen=capacity)
        self.lost = 0
        self._n = 0
        self._credit = 0.0

    def sampled(self) -> bool:
        """Whether the next message from a client is traced (evenly spread, not random,
        so that a test or a benchmark sees the same share every run)."""
        credit = self._credit + self.sample
        if credit >= 1.0:
            self._credit = credit - 1.0
            return True
        self._credit = credit
        return False

    def next_id(self) -> int:
        self._n += 1
        return trace_id(self.executor, self._n)

    def _append(self, record: tuple[Any, ...]) -> None:
        ring = self.ring
        if len(ring) == ring.maxlen:
            self.lost += 1
        ring.append(record)

    def process(self, tid: int, dataflow: str, step: str, activation: str, msg: Message,
                start_ms: float, end_ms: float, egressed: Egressed | None) -> None:
        results, within, egress_ms, target_ms = 0, 0, 0.0, math.nan
        if egressed is not None:
            results, within, egress_start, target_ms = egressed
            egress_ms = max(0.0, end_ms - egress_start)
        ctx = msg.ctx
        # In `Activity`'s field order (cameo_actors.tracing.records).
        self._append((PROCESS, self.executor, start_ms, end_ms, tid, msg.trace, dataflow, step,
                      activation, ctx.ingest_ms, msg.arrival_ms, msg.sent_ms, msg.size,
                      results, within, egress_ms, target_ms, -1, msg.is_watermark))

    def transfer(self, kind: str, start_ms: float, end_ms: float) -> None:
        """The worker thread packed (`SERIALIZE`) or unpacked (`DESERIALIZE`) a batch."""
        self._append((kind, self.executor, start_ms, end_ms))

    def drain(self) -> tuple[list[tuple[Any, ...]], int]:
        """The activities recorded since the last drain, and how many were overwritten
        before anyone collected them (since the start)."""
        out = list(self.ring)
        self.ring.clear()
        return out, self.lost


def make_tracer(executor: int, sample: float, capacity: int) -> Tracer | None:
    """A tracer, or None when tracing is off (then the message path pays one test)."""
    return Tracer(executor, sample, capacity) if sample > 0 else None

