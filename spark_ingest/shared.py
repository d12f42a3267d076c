"""Shared inputs: one Spark input query feeds every dataflow whose source names the input.

A source connector with `cameo.input = "<name>"` subscribes its source to the input
of that name. Spark then reads and parses the input once per micro-batch, whatever
the number of dataflows; its write tasks push each subscriber's columns to that
subscriber's source, which keeps its own positions and drops a replayed batch it
already has (the Spark batch id, marked per source and query), so each subscriber
is exactly once on its own.

What a subscriber reads: a dataflow that subscribes to an input whose query already
runs reads from where that query is, as a new consumer of a topic reads from its
end; the first subscriber of a new input reads it from its start, as any Spark query.
That is why sharing is asked for by name and not inferred from equal options: a
dataflow deployed on a folder that another dataflow has read for a week would
otherwise miss the week without having asked.

The subscribers' connectors must agree on what is read (`merged`); they may differ
only in how fast it is read (the smallest trigger and `maxFilesPerTrigger`-like caps
are taken) and in what each takes of it (`cameo.landed_ms`, `cameo.order`). Pure: no
Spark, no Ray.

>>> a = ConnectorSpec("json", (("path", "in/"), ("maxFilesPerTrigger", "30"),
...                            ("cameo.input", "events"), ("cameo.landed_ms", "true")), 1000)
>>> b = ConnectorSpec("json", (("path", "in/"), ("maxFilesPerTrigger", "60"),
...                            ("cameo.input", "events")), 2000)
>>> m = merged("events", [(Subscriber("alerts", "logs"), a), (Subscriber("bulk", "metrics"), b)])
>>> m.trigger_ms, dict(m.options)["maxfilespertrigger"], dict(m.options)["cameo.landed_ms"]
(1000, '30', 'true')
>>> subscribers_option([Subscriber("alerts", "logs"), Subscriber("bulk", "metrics")])
'alerts:logs,bulk:metrics'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cameo_actors.dataflow.spec import ConnectorSpec
from cameo_actors.errors import UserError
from spark_ingest.exceptions import CameoSparkError

#: The tier option (`cameo.input`) that names a shared input.
INPUT_OPTION = "cameo.input"
#: Spark options capping a micro-batch: subscribers may differ; the smallest is taken.
CAPS = frozenset({"maxfilespertrigger", "maxbytespertrigger", "maxoffsetspertrigger",
                  "maxrecordspertrigger"})
#: Tier options saying what a subscriber takes: any subscriber's "true" holds.
TAKEN = {"cameo.landed_ms": "true"}
#: Tier options each subscriber keeps for itself (its own order of messages).
OWN = frozenset({"cameo.order", INPUT_OPTION})


class ShareConflict(CameoSparkError, UserError):
    """Two dataflows subscribe to one shared input with connectors that read differently.

    >>> print(ShareConflict("events", "'path' as dataflow 'a' has it: 'in/'",
    ...                     "'old/' (dataflow 'b')", "give b its own input name"))
    shared input 'events': expected 'path' as dataflow 'a' has it: 'in/', got "'old/' (dataflow 'b')". Fix: give b its own input name
    """

    @property
    def where(self) -> str:
        return f"shared input {self.subject!r}"


@dataclass(frozen=True, order=True)
class Subscriber:
    """A dataflow's source fed by a shared input."""

    dataflow: str
    source: str


def input_name(connector: ConnectorSpec | None) -> str | None:
    """The shared input a source connector subscribes to (None: a query of its own)."""
    if connector is None:
        return None
    return dict(connector.options).get(INPUT_OPTION) or None


def subscribers_option(subscribers: Sequence[Subscriber]) -> str:
    """The `cameo` writer's `subscribers` option: "dataflow:source,..." (names hold
    neither ':' nor ',')."""
    return ",".join(f"{s.dataflow}:{s.source}" for s in subscribers)


def _lowered(c: ConnectorSpec) -> dict[str, str]:
    """A connector's options by lower-case name, as Spark reads them."""
    return {k.lower(): v for k, v in c.options}


def merged(name: str, subscribed: Sequence[tuple[Subscriber, ConnectorSpec]]) -> ConnectorSpec:
    """The connector of the shared input `name`'s query, from its subscribers' connectors.

    Raises:
        ShareConflict: the connectors differ in format, in a Spark option other than a
            cap, in a tier option other than those each takes (`TAKEN`, `OWN`), or in
            their checkpoint.
    """
    if not subscribed:
        raise ValueError(f"shared input {name!r}: no subscriber")
    (first, base), rest = subscribed[0], subscribed[1:]
    options = _lowered(base)
    triggers = [c.trigger_ms for _, c in subscribed]  # None: Spark's default, as soon as it can
    trigger = None if None in triggers else min(t for t in triggers if t is not None)
    for who, c in rest:
        def conflict(what: str, mine: object, theirs: object, w: Subscriber = who) -> ShareConflict:
            return ShareConflict(
                name, f"{what} as dataflow {first.dataflow!r} has it: {mine!r}",
                f"{theirs!r} (dataflow {w.dataflow!r})",
                f"make the connectors of {first.dataflow!r} and {w.dataflow!r} read the same "
                f"input, or give {w.dataflow!r}'s source another `{INPUT_OPTION}` (or none)")
        if c.format != base.format:
            raise conflict("the format", base.format, c.format)
        if c.checkpoint != base.checkpoint:
            raise conflict("the checkpoint", base.checkpoint, c.checkpoint)
        theirs = _lowered(c)
        for key in sorted(set(options) | set(theirs)):
            mine, other = options.get(key), theirs.get(key)
            if key in OWN or mine == other:
                continue
            if key in CAPS and (mine or "0").isdigit() and (other or "0").isdigit():
                options[key] = str(min(int(v) for v in (mine, other) if v is not None))
            elif key in TAKEN and TAKEN[key] in (str(mine).lower(), str(other).lower()):
                options[key] = TAKEN[key]
            else:
                raise conflict(f"option {key!r}", mine, other)
    options.pop("cameo.order", None)
    return ConnectorSpec(base.format, tuple(options.items()), trigger, base.checkpoint)
