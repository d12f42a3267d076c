"""Checkpoint markers: each Spark checkpoint the tier starts a query on says whose it is.

A Spark checkpoint holds a query's positions: for a file source, the files it read
under the folder it reads; for a file sink, the batches it wrote. Spark resumes any
checkpoint it is given. A dataflow deployed again under a name used before gets the
old default checkpoint (`<root>/<dataflow>/<in|out|errors>-<step>`): with another
input folder, every micro-batch of its input query failed (`Wrong basePath`), and
nothing said so. So the tier keeps a small marker, `_cameo_checkpoint.json`, in each
checkpoint directory: the dataflow, the query (`in-<source>`, `out-<sink>`,
`errors-errors`) and a fingerprint of what the positions are positions *in*: the
connector's format and Spark options (the path, a Kafka topic, ...), without the
options that only pace a query (`maxFilesPerTrigger`, ...), the tier's own
`cameo.*` options and the trigger. Before a query starts (`verdict`):

- no checkpoint yet: a new one, marked;
- the same owner: resumed (a restarted tier; a dataflow deployed again with the same
  connectors goes on after the files its predecessor read, as Spark does);
- a checkpoint without a marker (made before markers, or by hand): adopted, and
  marked as adopted (the tier did not see it start, so it cannot vouch for it);
- another fingerprint, dataflow or query: refused (`CheckpointConflict`).

`fresh_checkpoints` deletes the refused and the adopted ones, so those queries start
anew (an input then reads every file of its folder again).

A new checkpoint for a file sink whose path holds a sink log (`_spark_metadata`) of
an earlier query is refused too: Spark would skip the new query's first batches as
"already committed".

Why a marker rather than a deployment id in the checkpoint path: with a new
directory per deployment, a dataflow deployed again (the same spec after a cancel,
or after a crash of the process that ran the tier) would re-read every file of its
input folder into the same output; old directories would pile up; and a checkpoint
the user names in the connector cannot carry an id. The marker keeps Spark's resume
semantics and turns the one harmful case, a checkpoint of something else, into an
error at deploy with its fix.

>>> new = Owner("d", "in-s", "json", {"path": "in/", "maxFilesPerTrigger": "3"})
>>> verdict(None, False, new), verdict(None, True, new), verdict(new.to_dict(), True, new)
('new', 'adopt', 'resume')
>>> verdict({**new.to_dict(), "adopted": True}, True, new)
'adopt'
>>> verdict(Owner("d", "in-s", "json", {"path": "old/"}).to_dict(), True, new)
'conflict'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_ingest.exceptions import CheckpointConflict
from spark_ingest.storage import entries, filesystem

#: The marker's file name in a checkpoint directory (Spark ignores files it does not know).
MARKER = "_cameo_checkpoint.json"
#: A file sink's log of committed batches, under its output path.
SINK_LOG = "_spark_metadata"
#: How a marker's `dataflow` names a shared input's query (`spark_ingest.shared`), which
#: belongs to the input, not to any one of the dataflows it feeds.
SHARED = "shared input "
#: Spark options that pace a query without changing what its positions refer to (lower case).
PACING_OPTIONS = frozenset({
    "maxfilespertrigger", "maxbytespertrigger", "maxoffsetspertrigger", "minoffsetspertrigger",
    "maxtriggerdelay", "maxrecordspertrigger", "latestfirst", "mode", "columnnameofcorruptrecord",
})


@dataclass(frozen=True)
class Owner:
    """What a checkpoint belongs to: a query of a dataflow, and where it reads or writes.

    Attributes:
        dataflow: the dataflow's name.
        query: `in-<source>`, `out-<sink>` or `errors-errors`.
        format: the connector's format ("json", "parquet", ...).
        options: the connector's Spark options.
    """

    dataflow: str
    query: str
    format: str
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """A hash of the format and the options that say where the positions are."""
        kept = sorted((k.lower(), v) for k, v in self.options.items()
                      if k.lower() not in PACING_OPTIONS)
        text = json.dumps([self.format, kept], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """For messages: "input 'in-s' of dataflow 'd' (json at 'in/')"."""
        return describe(self.to_dict())

    def to_dict(self, *, adopted: bool = False) -> dict[str, Any]:
        """The marker's content; `adopted`: the checkpoint was there, unmarked, already."""
        where = self.options.get("path") or self.options.get("subscribe") \
            or self.options.get("topic")
        return {"dataflow": self.dataflow, "query": self.query, "format": self.format,
                "where": where, "fingerprint": self.fingerprint, "adopted": adopted}


def describe(marker: Mapping[str, Any]) -> str:
    """A marker (`Owner.to_dict`) in words."""
    role = {"in": "input", "out": "output", "errors": "errors"}.get(
        str(marker.get("query", "")).split("-", 1)[0], "query")
    where = f" at {marker['where']!r}" if marker.get("where") else ""
    owner = str(marker.get("dataflow"))
    if owner.startswith(SHARED):
        return f"{SHARED}{owner[len(SHARED):]!r} ({marker.get('format')}{where})"
    return (f"{role} {marker.get('query')!r} of dataflow {marker.get('dataflow')!r} "
            f"({marker.get('format')}{where})")


def verdict(found: Mapping[str, Any] | None, has_state: bool, expected: Owner) -> str:
    """What to do with a checkpoint directory: "new" (nothing there), "resume" (it is
    `expected`'s), "adopt" (state without a marker, or adopted so before) or "conflict"
    (someone else's)."""
    if found is None:
        return "adopt" if has_state else "new"
    mine = expected.to_dict()
    if not all(found.get(k) == mine[k] for k in ("dataflow", "query", "fingerprint")):
        return "conflict"
    return "adopt" if found.get("adopted") else "resume"


def read(location: str) -> tuple[dict[str, Any] | None, bool]:
    """(the marker or None, whether the directory holds anything else)."""
    names = entries(location)
    state = any(n not in (MARKER, SUBSCRIBERS) for n in names)
    if MARKER not in names:
        return None, state
    fs, path = filesystem(location)
    with fs.open_input_stream(f"{path}/{MARKER}") as f:
        raw = f.read()
    try:
        marker = json.loads(raw)
    except ValueError:
        marker = None
    if not isinstance(marker, dict):  # unreadable: nobody's, so never resumed as ours
        marker = {"dataflow": None, "query": None, "format": "an unreadable marker"}
    return marker, state


def write(location: str, owner: Owner, *, adopted: bool = False) -> None:
    fs, path = filesystem(location)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{MARKER}") as f:
        f.write(json.dumps(owner.to_dict(adopted=adopted), indent=1).encode())


#: A shared input's checkpoint records its subscribers here ("dataflow:source" lines), so
#: that when its query starts again (a restarted tier), the first subscriber back does
#: not read what the others are owed alone.
SUBSCRIBERS = "_cameo_subscribers"


def read_subscribers(location: str) -> list[tuple[str, str]]:
    """The (dataflow, source) pairs a shared input's query fed when it last ran."""
    if SUBSCRIBERS not in entries(location):
        return []
    fs, path = filesystem(location)
    with fs.open_input_stream(f"{path}/{SUBSCRIBERS}") as f:
        lines = f.read().decode().split()
    return [(d, s) for d, _, s in (line.partition(":") for line in lines) if d and s]


def write_subscribers(location: str, subscribers: list[tuple[str, str]]) -> None:
    fs, path = filesystem(location)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{SUBSCRIBERS}") as f:
        f.write("".join(f"{d}:{s}\n" for d, s in subscribers).encode())


def delete(location: str) -> None:
    fs, path = filesystem(location)
    fs.delete_dir(path)


def sink_log_batches(path: str) -> int:
    """How many entries a file sink's log under `path` has (0: none)."""
    return len(entries(f"{path.rstrip('/')}/{SINK_LOG}"))


@dataclass(frozen=True)
class Plan:
    """One query's checkpoint, judged before anything starts.

    Attributes:
        location: the checkpoint directory.
        owner: the query it is for.
        verdict: see `verdict`; "conflict" only when the caller asked for fresh checkpoints.
        fresh: whether the caller asked for fresh checkpoints.
        sink_path: a file sink's output path (outputs only), whose log `check` looked at.
    """

    location: str
    owner: Owner
    verdict: str
    fresh: bool = False
    sink_path: str | None = None

    @property
    def reset(self) -> bool:
        """Whether `apply` deletes the checkpoint (the query starts anew)."""
        return self.fresh and self.verdict in ("conflict", "adopt")


def check(location: str, owner: Owner, *, fresh: bool, sink_path: str | None = None) -> Plan:
    """Judge a query's checkpoint; raise `CheckpointConflict` unless it may be used.
    Reads only: `apply` makes the plan so."""
    found, has_state = read(location)
    v = verdict(found, has_state, owner)
    if v == "conflict" and not fresh:
        raise CheckpointConflict(
            location, f"a checkpoint of {owner.describe()}", f"one of {describe(found or {})}",
            "deploy with fresh_checkpoints=True (SparkTier.deploy or start) to delete it and "
            "start this query anew (an input then reads every file of its folder), or give "
            "the connector its own `checkpoint` directory, or deploy under another name")
    plan = Plan(location, owner, v, fresh, sink_path)
    if sink_path is not None and (v == "new" or plan.reset):
        batches = sink_log_batches(sink_path)
        if batches:
            raise CheckpointConflict(
                f"{sink_path.rstrip('/')}/{SINK_LOG}",
                f"no sink log of an earlier query under the output path of {owner.describe()}, "
                "which starts from a new checkpoint",
                f"a log of {batches} batches",
                "write to a new path, or delete that output folder (its files and its "
                f"{SINK_LOG} log): Spark would skip the new query's first batches as written")
    return plan


def apply(plan: Plan) -> None:
    """Make a checked plan so: delete a checkpoint to reset, mark new and adopted ones."""
    if plan.reset:
        delete(plan.location)
    if plan.verdict != "resume":
        write(plan.location, plan.owner, adopted=plan.verdict == "adopt" and not plan.reset)
