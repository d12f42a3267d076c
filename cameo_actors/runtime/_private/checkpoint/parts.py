"""Consistent checkpoints of a dataflow, taken with barriers that flow with the data.

The controller starts checkpoint c of a dataflow by putting a control message
``[checkpoint, c, positions]`` into each of its sources' mailboxes, with the
positions (client -> next ingest call) of everything enqueued before it. Like
every control message it is a barrier in the mailbox. At each activation
(Chandy-Lamport, unaligned as in Flink's unaligned checkpoints):

1. On the first barrier of c, the activation takes its snapshot (operator
   state, channel watermarks, a source's positions, a sink's result log) and
   sends the barrier on every channel out, ahead of its later output. Keyed
   state kept by bin is packed in bounded steps instead of at once: `SNAPSHOT`
   messages to itself, each first in its mailbox, so nothing of its own runs
   (its state stays as at the cut) while other activations' work runs between
   steps.
2. Until the barrier of c has come on every other input channel, the messages
   that arrive on those channels are processed as usual and also recorded:
   they were sent before the cut, so they belong to the checkpoint (its
   in-flight messages). A channel that reaches the end of its stream will send
   no barrier and counts as done.
3. Then the part is complete: its content (state, recorded messages, a sink's
   result log) is handed to the writer thread, which packs it in frames of at
   most `FRAME_ROWS` rows and writes it to the checkpoint storage; the
   controller, once every activation's part is written, commits the
   checkpoint's manifest.

Incremental: once an activation's part is in a completed checkpoint, its next
part may hold only the keyed state changed since (a window's keys whose state
changed, the windows opened since, the list of windows open), on top of the
parts before it (its *chain*: the last full part first; the manifest lists it
under "bases", and retiring old checkpoints keeps what a kept one builds on).
Restoring applies the chain's pieces in order. A part is full again when the
changes since the full one add up to half of it (`DELTA_SHARE`), when the
state moved in or out (migration), or when the previous part's checkpoint did
not complete.

Nothing is held: no channel waits for another's barrier (an aligned checkpoint
would hold the channels whose barrier came first, and with them a
latency-sensitive tenant's results behind a slow upstream). The cost is the
recorded messages, bounded by the credits of a channel. Restoring is the
reverse: each activation gets its state, its recorded messages are replayed
into it before anything else, and each source replays its ingress log
(`ingress_log.py`) after its positions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import msgpack
import pyarrow as pa

from cameo_actors.runtime._private.collector import state_coming_in
from cameo_actors.runtime.boundary import CheckpointPhases

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime.config import RuntimeConfig

#: The control kind of a checkpoint barrier (see `migration.is_control`).
CHECKPOINT = "checkpoint"
#: The control kind of a step of packing an activation's snapshot, a message to itself.
SNAPSHOT = "snapshot"
#: State entries (a key in a window) packed per step: bounds a step to a few ms.
SNAPSHOT_ENTRIES = 10_000
#: Rows (recorded messages' events, a sink's result rows) packed per frame of a part. The
#: writer thread packs a part one frame per call, and a msgpack call is not interrupted by
#: the interpreter's switch interval: a sink's result log packed at once (3,000-4,500
#: rows) held the worker thread 25-78 ms, beside a 20 ms tenant. 200 rows: about 1.5 ms.
FRAME_ROWS = 200
#: The control kind of a step of finding the bins of a restored activation's keys.
INDEX = "index"
#: Keys whose bins one such step finds (a hash each: a few ms).
INDEX_KEYS = 10_000
#: An activation's parts are incremental until the changes since its last full part add
#: up to this share of it (a restore then reads at most 1.5 times the state).
DELTA_SHARE = 0.5
#: At most this many incremental parts on top of a full one.
MAX_DELTAS = 30
#: The phases of a part, each stamped (epoch ms) as the part passes it: its first barrier
#: came (the snapshot began; at a source, once the mailbox before it ran), every input
#: channel's barrier came (aligned), the snapshot was packed, the part was written to
#: storage. A checkpoint's phases are each one's latest over its parts, from its start.
PHASES = ("barriers", "aligned", "packed", "written")


def phases_of(times: list[dict[str, float]]) -> CheckpointPhases | None:
    """A checkpoint's phases from its parts' `times` (each with "begun": when its barrier
    was put in its source's mailbox): seconds from the first barrier put in to the last
    part past each phase. None if a part has none (an executor of an older release).

    >>> phases_of([{"begun": 1000.0, "barriers": 1100.0, "aligned": 1100.0, "packed": 1150.0,
    ...             "written": 1300.0},
    ...            {"begun": 1000.0, "barriers": 1400.0, "aligned": 1500.0, "packed": 1500.0,
    ...             "written": 1550.0}])
    {'barriers_s': 0.4, 'aligned_s': 0.5, 'packed_s': 0.5, 'written_s': 0.55}
    """
    if not times or any(not all(p in t for p in ("begun", *PHASES)) for t in times):
        return None
    begun = min(t["begun"] for t in times)

    def since(phase: str) -> float:
        return round((max(t[phase] for t in times) - begun) / 1000.0, 3)
    return CheckpointPhases(barriers_s=since("barriers"), aligned_s=since("aligned"),
                            packed_s=since("packed"), written_s=since("written"))

#: A channel into an activation: (input port, upstream activation id; "" = ingress).
Channel = tuple[int, str]
#: A recorded in-flight message: (port, upstream, is_watermark, payload).
Recorded = tuple[int, str, bool, Any]
#: A part as storage gives it back (read whole), or as `Part.frames` made it.
PartBytes = bytes | memoryview | list[bytes]
#: One activation's part written: (its path in storage, a source's positions at the
#: barrier, its bytes, the stored parts it builds on: `Part.bases`).
Written = tuple[str, dict[str, int], int, list[str]]


@dataclass
class Content:
    """A complete part's content, handed over by the worker thread (`Part.take`) and
    packed by the writer thread (`frames`).

    Attributes:
        state: the activation's state at the first barrier, packed (without the
            operator's pieces).
        pieces: the operator's state packed in steps (msgpack objects, or lists of
            frames that make one).
        inflight: the messages recorded on channels whose barrier had not come.
        results: a sink's result log at the barrier, (first offset, chunks, id counts).
        nbytes: its size, once packed.
        times: when (epoch ms) the part passed each phase (`PHASES`) on the worker thread.
    """

    state: bytes
    pieces: list[bytes]
    inflight: list[Recorded]
    results: tuple[int, list[Any], list[Any] | None] | None
    nbytes: int = 0
    times: dict[str, float] = field(default_factory=dict)

    def frames(self) -> list[bytes]:
        """The part as msgpack objects one after the other: a head, then the recorded
        messages and the result log's chunks in frames of at most `FRAME_ROWS` rows (a
        message is never cut), then the operator's pieces. Once: it lets go of its
        content."""
        inflight = [_pack(f) for f in _frames(_as_rows(self.inflight), lambda m: m[3])]
        results, log = None, []
        if self.results is not None:
            base, chunks, seen = self.results
            log = [_pack(f) for f in _frames(_sliced(chunks), lambda c: c[0])]
            results = [base, len(log), seen]
        head = _pack({"state": self.state, "inflight_frames": len(inflight),
                      "results_frames": results, "pieces": len(self.pieces)})
        # A piece is one msgpack object, or a list of frames that make one (a store's
        # file: its header, then its mapped bytes, read only as they are written).
        pieces = [f for p in self.pieces for f in (p if isinstance(p, list) else (p,))]
        out = [head, *inflight, *log, *pieces]
        self.nbytes = sum(map(len, out))
        self.state, self.pieces, self.inflight, self.results = b"", [], [], None
        return out


def _pack(obj: Any) -> bytes:
    return cast(bytes, msgpack.packb(obj, use_bin_type=True))


def _as_rows(recorded: list[Recorded]) -> Iterator[Recorded]:
    """Recorded messages with rows: a source's overtaken columns were kept as they came
    (an Arrow batch is immutable) and are made rows here, off the worker thread, in
    slices of `FRAME_ROWS` (a conversion holds the interpreter's lock, as a msgpack call
    does: 50,000 rows at once would hold the worker thread that long), each then a
    message of its own; one at a time, so the rows are packed as they are made."""
    for port, upstream, watermark, payload in recorded:
        if payload.__class__ is pa.RecordBatch:
            for i in range(0, payload.num_rows, FRAME_ROWS):
                yield port, upstream, watermark, payload.slice(i, FRAME_ROWS).to_pylist()
        else:
            yield port, upstream, watermark, payload


def _rows(payload: Any) -> int:
    return len(payload) if isinstance(payload, list) else 1


def _frames(items: Iterable[Any], payload: Callable[[Any], Any]) -> Iterator[list[Any]]:
    """`items` in consecutive lists of at most `FRAME_ROWS` rows (an item of more alone)."""
    frame: list[Any] = []
    rows = 0
    for item in items:
        n = _rows(payload(item))
        if frame and rows + n > FRAME_ROWS:
            yield frame
            frame, rows = [], 0
        frame.append(item)
        rows += n
    if frame:
        yield frame


def _sliced(chunks: list[Any]) -> Iterator[Any]:
    """A result log's chunks, those of more than `FRAME_ROWS` rows cut (the same times)."""
    for events, ingest_ms, egress_ms in chunks:
        if isinstance(events, list) and len(events) > FRAME_ROWS:
            for i in range(0, len(events), FRAME_ROWS):
                yield events[i:i + FRAME_ROWS], ingest_ms, egress_ms
        else:
            yield events, ingest_ms, egress_ms


@dataclass
class Part:
    """One activation's part of checkpoint `ckpt`, from its first barrier on.

    Attributes:
        ckpt: the checkpoint's number.
        state: the activation's state at the first barrier, packed (a copy: the
            operator goes on changing); b"" while `head` is not None.
        pieces: the operator's state packed in steps: msgpack objects, each written
            as it is (no copy of a large state on the worker thread).
        head: the snapshot while its state is packed in steps (`SNAPSHOT`).
        pending: input channels whose barrier has not come yet.
        inflight: the messages that came on pending channels (the channels' state).
        results: a sink's result log at the barrier, (first offset, chunks, id counts).
        positions: a source's positions at the barrier (client -> next call).
        bases: the stored parts this one builds on (incremental: its chain before it,
            the full part first); [] for a full part.
        handed: its content, once complete and handed over to be written (`take`).
        times: when (epoch ms) it passed each phase of `PHASES` so far.
    """

    ckpt: int
    state: bytes
    pending: set[Channel]
    head: dict[str, Any] | None = None
    pieces: list[bytes] = field(default_factory=list)
    inflight: list[Recorded] = field(default_factory=list)
    results: tuple[int, list[Any], list[Any] | None] | None = None
    positions: dict[str, int] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)
    handed: Content | None = None
    times: dict[str, float] = field(default_factory=dict)

    @property
    def written(self) -> bool:
        return self.handed is not None

    @property
    def nbytes(self) -> int:
        """Its size, once written."""
        return self.handed.nbytes if self.handed is not None else 0

    def take(self) -> Content:
        """Its content, to be packed and written off the worker thread; the part keeps
        none of it (only its size, once packed)."""
        self.handed = Content(self.state, self.pieces, self.inflight, self.results,
                              times=self.times)
        self.state, self.pieces, self.inflight, self.results = b"", [], [], None
        return self.handed


def unpack_part(blob: PartBytes) -> dict[str, Any]:
    """A part written from `Content.frames` (joined, or not), as one dict: its state
    holds the operator's pieces, unpacked, under ``["operator"]["pieces"]``; "inflight"
    the recorded messages, "results" the result log (first offset, chunks, id counts) or
    None. Parts of versions before frames (their head held both) read the same."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=2**31 - 1)
    for frame in ([blob] if not isinstance(blob, list) else blob):
        unpacker.feed(frame)
    part: dict[str, Any] = next(unpacker)
    part["state"] = msgpack.unpackb(part["state"], raw=False, strict_map_key=False)
    if "inflight_frames" in part:
        part["inflight"] = [m for _ in range(part.pop("inflight_frames")) for m in next(unpacker)]
        results = part.pop("results_frames")
        if results is not None:
            base, n, seen = results
            results = [base, [c for _ in range(n) for c in next(unpacker)], seen]
        part["results"] = results
    pieces = [next(unpacker) for _ in range(part.pop("pieces", 0))]
    if pieces:
        part["state"]["operator"]["pieces"] = pieces
    return part


def part_size(blob: PartBytes) -> int:
    """The bytes of a part, whole or in frames."""
    return sum(map(len, blob)) if isinstance(blob, list) else len(blob)


def unpack_chain(blobs: list[PartBytes]) -> dict[str, Any]:
    """An activation's part and the parts it builds on (`Part.bases`, the full one first,
    it last) as one: its own, with every part's operator pieces in order."""
    parts = [unpack_part(blob) for blob in blobs]
    part = parts[-1]
    if len(parts) > 1:
        part["state"]["operator"]["pieces"] = [
            piece for p in parts for piece in p["state"]["operator"].get("pieces", ())]
    return part


@dataclass
class ChainRead:
    """An activation's chain of parts as a restore takes it (`read_chain`): unpacked into
    one part (`unpack_chain`), with the full part's size and the incremental parts' (what
    its next parts may build on: `Activation.chain_bytes`)."""

    part: dict[str, Any]
    full_bytes: int
    delta_bytes: int


def read_chain(blobs: list[PartBytes]) -> ChainRead:
    """`unpack_chain`, and the part sizes, for a restore: unpacked as state coming in
    (`collector.state_coming_in`)."""
    with state_coming_in():
        part = unpack_chain(blobs)
    return ChainRead(part, part_size(blobs[0]), sum(map(part_size, blobs[1:])))


def part_chains(manifest: dict[str, Any]) -> dict[str, list[str]]:
    """A checkpoint's parts (its manifest) as recovery reads them: activation -> the paths
    of its part, after the parts it builds on (incremental, the full one first)."""
    bases = manifest.get("bases", {})
    return {aid: [*bases.get(aid, ()), path] for aid, path in manifest["parts"].items()}


def interval_s(spec: DataflowSpec, config: RuntimeConfig) -> float:
    """The dataflow's checkpoint interval in seconds (0: no checkpoints, also in a pool
    without checkpoint storage, as an `ExecutorCore` alone in a test or a benchmark)."""
    if not config.checkpoint_url:
        return 0.0
    ms = spec.fault_tolerance.checkpoint_interval_ms
    return config.checkpoint_interval_s if ms is None else ms / 1000.0


def delivery(spec: DataflowSpec, config: RuntimeConfig) -> str | None:
    """"exactly_once" (results wait for the checkpoint after them before they can be
    read), "at_least_once" (read at once, with ids), or None (no checkpoints)."""
    if interval_s(spec, config) <= 0:
        return None
    return spec.fault_tolerance.delivery or config.delivery


def incremental(spec: DataflowSpec, config: RuntimeConfig) -> bool:
    """Whether the dataflow's parts may be incremental (its spec says, else the pool)."""
    own = spec.fault_tolerance.incremental
    return config.incremental_checkpoints if own is None else own
