"""A dataflow's outputs as a client reads them: pages after a cursor, followed as they
come, and committed whole or up to the rows a reader kept.

A page is committed with its cursor. Its first rows alone have no cursor of their own (a
page merges its sink instances' rows in egress order, and a cursor holds one offset per
instance), so `commit_first` reads again, from where the page started, as many rows as
were kept: the service shares them out among the instances afresh, and when that gives the
same rows (always, for a sink of one instance), their cursor is committed. Otherwise
nothing of the page is, and the next reader reads those rows again (at least once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

from cameo_actors.runtime.boundary import CANCELLED, FAILED, FINISHED
from cameo_actors.service.outputs import DEFAULT_PAGE
from cameo_actors.service.transport import ServiceError, as_objects

#: States after which a dataflow makes no more results.
ENDED_STATES = frozenset({FINISHED, CANCELLED, FAILED})
#: Refusals that mean the dataflow is gone, or ended and its outputs freed.
GONE = ("not_found", "dataflow_ended")


class OutputReader(Protocol):
    """The calls of the client that reading an output makes (`client.Client` has them)."""

    def results(self, name: str, sink: str | None = None, cursor: str | None = None,
                limit: int = DEFAULT_PAGE) -> dict[str, Any]: ...

    def errors(self, name: str, cursor: str | None = None, limit: int = DEFAULT_PAGE
               ) -> dict[str, Any]: ...

    def commit_results(self, name: str, cursor: str, sink: str | None = None
                       ) -> dict[str, Any]: ...

    def commit_errors(self, name: str, cursor: str) -> dict[str, Any]: ...

    def status(self, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Page:
    """One page of an output, as read.

    Attributes:
        rows: its rows, in egress order.
        start: the cursor it was read after (None: after the committed rows).
        cursor: the cursor after its last row.
        sink: the sink read (None for the error output).
        pending: rows after `cursor` when it was read.
        errors: a page of the error output (else of a sink's results).
    """

    rows: list[dict[str, Any]]
    start: str | None
    cursor: str
    sink: str | None
    pending: int
    errors: bool = False


def read_page(client: OutputReader, name: str, sink: str | None, cursor: str | None,
              limit: int, *, errors: bool = False) -> Page:
    """At most `limit` rows of a sink's results (or of the error output) after `cursor`."""
    what = f"the {'errors' if errors else 'results'} of {name!r}"
    answer = client.errors(name, cursor, limit) if errors else \
        client.results(name, sink, cursor, limit)
    return Page(as_objects(answer.get("rows"), what), cursor, str(answer["cursor"]),
                answer.get("sink", sink), int(answer["pending"]), errors)


def commit(client: OutputReader, name: str, page: Page) -> None:
    """Free every row of `page` and before it."""
    if page.errors:
        client.commit_errors(name, page.cursor)
    else:
        client.commit_results(name, page.cursor, page.sink)


def commit_first(client: OutputReader, name: str, page: Page, n: int) -> bool:
    """Free the first `n` rows of `page` (and those before it) when the service gives them
    a cursor of their own (see the module's doc); whether it did. A refusal meanwhile (the
    rows were committed by another reader, the dataflow was replaced) commits nothing."""
    if n <= 0:
        return False
    if n >= len(page.rows):
        commit(client, name, page)
        return True
    try:
        again = read_page(client, name, page.sink, page.start, n, errors=page.errors)
        if not _same(again.rows, page.rows[:n]):
            return False
        commit(client, name, again)
    except ServiceError:  # nothing committed: the next reader reads these rows again
        return False
    return True


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The same rows, value for value (NaN equal to NaN: compared as msgpack)."""
    try:
        return bool(msgpack.packb(a, use_bin_type=True) == msgpack.packb(b, use_bin_type=True))
    except (OverflowError, TypeError, ValueError):  # an int beyond 64 bits (from JSON)
        return a == b


def has_ended(client: OutputReader, name: str) -> bool:
    """Whether the dataflow ended (finished, cancelled, failed) or is gone."""
    try:
        return client.status(name)["state"] in ENDED_STATES
    except ServiceError as e:
        if e.code in GONE:
            return True
        raise


def pages(client: OutputReader, name: str, sink: str | None = None, *, errors: bool = False,
          cursor: str | None = None, limit: int = DEFAULT_PAGE, poll_s: float = 0.5,
          max_rows: int | None = None, until_ended: bool = False,
          until_caught_up: bool = False, stop: threading.Event | None = None
          ) -> Iterator[Page]:
    """Pages of a sink (or of the error output) as they come, each one once; committing
    is the caller's (`commit`, `commit_first`), before it asks for the next page.

    A full page is followed by the next at once; an empty one by a wait of `poll_s` (cut
    short by `stop`). The arguments are `Client.follow`'s.
    """
    if poll_s < 0 or (max_rows is not None and max_rows < 1):
        raise ValueError(f"follow: expected poll_s >= 0 and max_rows >= 1 (or None), got "
                         f"poll_s={poll_s!r}, max_rows={max_rows!r}")
    stop = stop or threading.Event()
    seen = 0
    ended = False  # the dataflow ended: read once more, then stop
    while not stop.is_set():
        want = limit if max_rows is None else min(limit, max_rows - seen)
        try:
            page = read_page(client, name, sink, cursor, want, errors=errors)
        except ServiceError as e:  # gone, or ended and its outputs freed, while we followed
            if until_ended and e.code in GONE:
                return
            raise
        yield page
        seen += len(page.rows)
        cursor, sink = page.cursor, page.sink
        if max_rows is not None and seen >= max_rows:
            return
        if page.pending:
            continue
        if until_caught_up or ended:
            return
        if until_ended:
            ended = has_ended(client, name)
            if ended:
                continue  # rows may have come between that read and the state change
        stop.wait(poll_s)
