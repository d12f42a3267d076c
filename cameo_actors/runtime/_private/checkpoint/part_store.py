"""An executor's checkpoint parts: in the pool's checkpoint storage, and copied to its
node for local recovery (`PartStore`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

from cameo_actors.runtime._private.checkpoint.storage import (
    CheckpointDamaged,
    CheckpointStorage,
    StorageError,
)
from cameo_actors.runtime.config import RuntimeConfig

logger = logging.getLogger(__name__)


def part_store(config: RuntimeConfig, executor: int) -> PartStore | None:
    """Executor `executor`'s parts, as `config` wants them (None: no checkpoints)."""
    if not config.checkpoint_url:
        return None
    folder = config.local_copies_dir(executor)
    copies = CheckpointStorage(folder, sync=False) if folder else None
    return PartStore(CheckpointStorage(config.checkpoint_url), copies, config.checkpoints_kept)


class PartStore:
    """An executor's checkpoint parts: written to the checkpoint storage and, with local
    recovery, copied to a folder on the executor's node (`copies`). A restore reads a part
    from its copy first, if the executor finds one there (it was restarted on the same
    node) and its checksum holds, else from the storage: Flink's local recovery, which
    spares a restore the download of its state. Copies are kept for the parts of the
    `kept` newest checkpoints completed here, and deleted with the dataflow."""

    def __init__(self, storage: CheckpointStorage, copies: CheckpointStorage | None = None,
                 kept: int = 2) -> None:
        self.storage, self.copies, self.kept = storage, copies, kept
        #: dataflow -> the paths of the parts of its newest checkpoints completed here
        self._recent: dict[str, list[set[str]]] = {}

    def write(self, dataflow: str, deployment: str, ckpt: int, part: str,
              data: list[bytes]) -> str:
        """`CheckpointStorage.write_part`, and the copy (at the same path in `copies`; one
        that cannot be written is only logged: the storage has the part)."""
        path = self.storage.write_part(dataflow, deployment, ckpt, part, data)
        if self.copies is not None:
            try:
                self.copies.write_part(dataflow, deployment, ckpt, part, data)
            except StorageError as e:
                logger.warning("no local copy of checkpoint part %s: %s", path, e)
        return path

    def read(self, path: str) -> tuple[memoryview, bool]:
        """A part, checked, and whether it came from its local copy."""
        if self.copies is not None:
            try:
                return self.copies.read_part(path), True
            except CheckpointDamaged as e:
                if not e.missing:  # (none here: restarted on another node, or never written)
                    logger.warning("local copy refused, reading the storage: %s", e)
            except StorageError as e:
                logger.warning("local copy unreadable, reading the storage: %s", e)
        return self.storage.read_part(path), False

    def completed(self, dataflow: str, deployment: str, chains: Iterable[list[str]]) -> None:
        """A checkpoint of `dataflow` completed, its parts here in `chains`: the copies no
        longer in the chains of the `kept` newest go."""
        if self.copies is None:
            return
        recent = self._recent.setdefault(dataflow, [])
        recent.append({path for chain in chains for path in chain})
        del recent[:-self.kept]
        self.copies.keep_parts(dataflow, deployment, set().union(*recent))

    def drop(self, dataflow: str) -> None:
        """The dataflow ended here, or left: its copies go."""
        self._recent.pop(dataflow, None)
        if self.copies is not None:
            with contextlib.suppress(StorageError):
                self.copies.drop(dataflow)

