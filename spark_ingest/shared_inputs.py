"""The Spark queries of shared inputs: one input query feeds every source naming the input.

`SparkTier` owns one `SharedInputs`, which starts, restarts and stops the query of each
shared input as its subscribers come and go (what sharing means, and what it is
refused for: `spark_ingest.shared`). Changes happen between micro-batches, under the
tier's lock; the supervisor starts a query that died for a transient reason again
through `subscribe`, as it does a dataflow's own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, SourceStep
from cameo_actors.dataflow.validate import NAME_RE
from spark_ingest import checkpoints
from spark_ingest.reading import connector_of, read_plan
from spark_ingest.session import stop_gracefully
from spark_ingest.shared import ShareConflict, Subscriber, input_name, merged


class Host(Protocol):
    """What `SharedInputs` needs of the tier that owns it (`SparkTier`)."""

    runtime: Any
    lock: threading.RLock
    stopping_all: bool

    def input_query(self, feeds: list[tuple[DataflowSpec, SourceStep]], c: ConnectorSpec,
                    checkpoint: str, query_name: str) -> Any: ...

    def track(self, name: str, source: str, query: Any) -> None: ...


@dataclass
class SharedQuery:
    """The query of a shared input (`spark_ingest.shared`) and the sources it feeds.

    Attributes:
        name: the input's name (`cameo.input`).
        subscribed: each subscriber's connector, as its dataflow's spec has it.
        location: the query's checkpoint.
        query: the running StreamingQuery.
    """

    name: str
    subscribed: dict[Subscriber, ConnectorSpec]
    location: str
    query: Any = None



class SharedInputs:
    """The shared inputs of one `SparkTier`, by name (`queries`)."""

    def __init__(self, tier: Host) -> None:
        self.tier = tier
        self.queries: dict[str, SharedQuery] = {}

    def leave(self, name: str, step: str) -> None:
        """The source `step` of dataflow `name` no longer reads its shared input (if it
        had one): its query goes on for the others."""
        who = Subscriber(name, step)
        with self.tier.lock:
            shared = next((sq.name for sq in self.queries.values() if who in sq.subscribed),
                          None)
            if shared is not None:
                self.unsubscribe(shared, who)

    def check(self, shared: str, spec: DataflowSpec, step: SourceStep, c: ConnectorSpec) -> None:
        """Raise `ShareConflict` (or the error of a bad option) if `spec`'s source `step`
        cannot join the shared input: checked in full, before any query stops."""
        if not NAME_RE.match(shared):
            raise ShareConflict(shared, "a name of letters, digits, '_', '.' and '-' (at most "
                                "128)", shared, f"name the input of {spec.name!r} like a "
                                "dataflow: e.g. cameo.input = 'events'")
        who = Subscriber(spec.name, step.id)
        with self.tier.lock:
            sq = self.queries.get(shared)
            subscribed = {**(sq.subscribed if sq else {}), who: c}
        feeds = self.feeds([s for s in subscribed if s != who]) + [(spec, step)]
        read_plan(feeds, merged(shared, sorted(subscribed.items())))

    def feeds(self, subscribers: list[Subscriber]) -> list[tuple[DataflowSpec, SourceStep]]:
        """(spec, source step) of each subscriber that still runs with its source (the
        others left the runtime: a cancel the tier did not see)."""
        feeds = []
        for who in sorted(subscribers):
            try:
                spec = DataflowSpec.from_dict(self.tier.runtime.describe(who.dataflow)["spec"])
                step = spec.step(who.source)
            except (KeyError, ValueError):
                continue
            if isinstance(step, SourceStep):
                feeds.append((spec, step))
        return feeds

    def subscribe(self, shared: str, who: Subscriber, c: ConnectorSpec, location: str) -> Any:
        """Feed `who` from the shared input's query: started, or (between micro-batches)
        started again with one subscriber more, from its checkpoint. The query.

        A query that starts anew takes back the subscribers its checkpoint records that
        still run with this input, so the first dataflow back after a restart does not
        read alone what the others are owed."""
        with self.tier.lock:
            sq = self.queries.get(shared)
            if sq is not None and who in sq.subscribed and sq.query is not None \
                    and sq.query.isActive:
                return sq.query
            subscribed = dict(sq.subscribed) if sq else self.recorded(shared, location)
            subscribed[who] = c
            merged(shared, sorted(subscribed.items()))  # refuses before anything stops
            if sq is not None and sq.query is not None:
                stop_gracefully(sq.query, drain=False)
            try:
                query = self.run(shared, subscribed, location)
                if query is None or who not in self.queries[shared].subscribed:
                    raise KeyError(f"dataflow {who.dataflow!r} is not running")
                return query
            except Exception:
                if sq is not None and sq.subscribed:  # the others go on as they were
                    self.run(shared, sq.subscribed, location)
                raise

    def recorded(self, shared: str, location: str) -> dict[Subscriber, ConnectorSpec]:
        """The subscribers the shared input's checkpoint records that still run, with
        their sources still subscribed to it."""
        out = {}
        for dataflow, source in checkpoints.read_subscribers(location):
            try:
                spec = DataflowSpec.from_dict(self.tier.runtime.describe(dataflow)["spec"])
                c = connector_of(spec, "input", source)
            except (KeyError, ValueError):  # cancelled since, or no longer this source
                continue
            if input_name(c) == shared:
                out[Subscriber(dataflow, source)] = c
        return out

    def unsubscribe(self, shared: str, who: Subscriber) -> None:
        """`who` no longer reads the shared input: its query stops (between micro-batches)
        and starts again, from its checkpoint, for the subscribers left. While the tier
        stops every query (`stop_all`), the record of subscribers stays as it was."""
        with self.tier.lock:
            sq = self.queries.get(shared)
            if sq is None:
                return
            sq.subscribed.pop(who, None)
            if sq.query is not None and sq.query.isActive:  # it still feeds `who`
                stop_gracefully(sq.query, drain=False)
            if not sq.subscribed or self.tier.stopping_all:
                if not sq.subscribed:
                    del self.queries[shared]
                if not self.tier.stopping_all:
                    checkpoints.write_subscribers(sq.location, [])
                return
            self.run(shared, sq.subscribed, sq.location)

    def run(self, shared: str, subscribed: dict[Subscriber, ConnectorSpec], location: str) -> Any:
        """Start the shared input's query for those of `subscribed` that still run and
        record them in its checkpoint; every subscriber's entry in `queries` names it.
        The query, or None when none runs any more. Holds the lock."""
        feeds = self.feeds(list(subscribed))
        subscribed = {who: c for who, c in subscribed.items()
                      if (who.dataflow, who.source) in {(d.name, st.id) for d, st in feeds}}
        if not subscribed:  # every one left the runtime meanwhile
            self.queries.pop(shared, None)
            checkpoints.write_subscribers(location, [])
            return None
        checkpoints.write_subscribers(location, [(s.dataflow, s.source) for s in sorted(subscribed)])
        query = self.tier.input_query(feeds, merged(shared, sorted(subscribed.items())),
                                      location, f"cameo-input-{shared}")
        self.queries[shared] = SharedQuery(shared, dict(subscribed), location, query)
        for who in subscribed:  # brought back from the record too: drained, stopped, reported
            self.tier.track(who.dataflow, who.source, query)
        return query
