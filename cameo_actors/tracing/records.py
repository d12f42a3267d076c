"""What an executor traces: one record per activity, typed once for the runtime and the
analysis (SnailTrail's activities).

An executor keeps these as plain tuples in the field order of `Activity` (cheap to make
on the worker thread); the analysis turns them into `Activity` with `Activity._make`.
All times are float ms since the epoch, from the executor's clock.

Kinds:
- PROCESS: an activation ran one message on the executor's worker thread. It carries
  the message's story: when it entered the runtime (`ingest_ms`), when its sender handed
  it over (`sent_ms`), when it entered the mailbox (`arrival_ms`), and which activity
  sent it (`parent`). From these the analysis derives the waiting in the mailbox and run
  queue (arrival -> start), the transfer between executors (sent -> arrival) and the
  ingest waiting for backpressure (ingest -> arrival of a client's message).
  If the activity wrote results, `egress_ms` is the tail of [start, end] spent on it.
- SERIALIZE: the worker thread packed and sent the batches for other executors.
- DESERIALIZE: the worker thread unpacked a batch from executor `peer`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

PROCESS = "process"
SERIALIZE = "serialize"
DESERIALIZE = "deserialize"
KINDS = (PROCESS, SERIALIZE, DESERIALIZE)

#: `parent` of a message that came from a client's call (a source's ingest).
FROM_CLIENT = 0
#: `parent` (and a message's trace mark) when nothing is known: not traced.
UNTRACED = -1
#: Process activity ids: `n * EXECUTOR_SLOTS + executor`, unique in a pool of fewer
#: executors than this, so the sender of a message is known from its parent's id.
EXECUTOR_SLOTS = 4096


def trace_id(executor: int, n: int) -> int:
    """The id of the `n`-th (from 1) process activity traced on `executor`."""
    return n * EXECUTOR_SLOTS + executor


def executor_of(activity_id: int) -> int:
    """The executor on which process activity `activity_id` ran."""
    return activity_id % EXECUTOR_SLOTS


class Activity(NamedTuple):
    """One traced activity (see the module's text for the kinds).

    Example:
        >>> a = Activity(PROCESS, 0, 10.0, 12.5, id=trace_id(0, 1), parent=FROM_CLIENT,
        ...              dataflow="alerts", step="filter", activation="alerts/filter#0",
        ...              ingest_ms=9.0, arrival_ms=9.5)
        >>> a.end_ms - a.start_ms, executor_of(a.id)
        (2.5, 0)
    """

    kind: str
    executor: int
    start_ms: float
    end_ms: float
    #: process: its id (`trace_id`); other kinds: 0
    id: int = 0
    #: process: the id of the process activity whose output this message is;
    #: FROM_CLIENT for a client's call; UNTRACED if unknown
    parent: int = UNTRACED
    dataflow: str = ""
    step: str = ""
    activation: str = ""
    #: process: when the message's data entered the runtime (its latency counts from here)
    ingest_ms: float = math.nan
    #: process: when the message entered the activation's mailbox
    arrival_ms: float = math.nan
    #: process: when the sending activation handed it over (NaN from a client)
    sent_ms: float = math.nan
    #: process: events in the message (0 for a watermark or control message)
    events: int = 0
    #: process: results written to the sink's log, and how many of them within target
    results: int = 0
    within: int = 0
    #: process: the tail of [start, end] spent writing results
    egress_ms: float = 0.0
    #: process that wrote results: the dataflow's latency target then (else NaN)
    target_ms: float = math.nan
    #: deserialize: the sending executor; otherwise -1
    peer: int = -1
    #: process: the message was a watermark or control message
    watermark: bool = False
