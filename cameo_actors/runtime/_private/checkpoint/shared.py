"""Is the pool's storage shared? A pool on several nodes needs its checkpoints and ingress
logs where every node reaches them: an executor restarted on another node restores from
them. A folder of the same name may be a disk of each node's own, so the process that
starts the pool leaves a mark in each (`leave_marks`), and every executor looks for it
(`marks_missing`). `Runtime.start` refuses the pool if one does not find it, and
`add_executors` refuses executors that do not."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable

from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.executor_api import StorageMarks
from cameo_actors.runtime.config import RuntimeConfig


def leave_marks(config: RuntimeConfig, token: str) -> None:
    """Marks named `token` in `config`'s checkpoint storage and ingress log folder."""
    if config.checkpoint_url:
        CheckpointStorage(config.checkpoint_url).leave_mark(token)
    if config.ingress_log_dir:
        folder = os.path.join(config.ingress_log_dir, "_marks")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, token), "w", encoding="utf-8") as f:
            f.write(token)


def marks_missing(config: RuntimeConfig, token: str) -> list[str]:
    """The storage of `config` in which this process does not find the marks `token`."""
    missing = []
    if config.checkpoint_url and not CheckpointStorage(config.checkpoint_url).has_mark(token):
        missing.append(f"checkpoint_url {config.checkpoint_url}")
    if config.ingress_log_dir:
        try:
            with open(os.path.join(config.ingress_log_dir, "_marks", token), encoding="utf-8") as f:
                seen = f.read() == token
        except OSError:
            seen = False
        if not seen:
            missing.append(f"ingress_log_dir {config.ingress_log_dir}")
    return missing


def remove_marks(config: RuntimeConfig, token: str) -> None:
    if config.checkpoint_url:
        CheckpointStorage(config.checkpoint_url).remove_mark(token)
    if config.ingress_log_dir:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(config.ingress_log_dir, "_marks", token))


#: How to give a pool storage that every node reaches.
FIX = ("a URL pyarrow.fs understands (s3://, gs://, hdfs://) or a folder every node mounts "
       "(NFS, a shared volume) for the checkpoints, and a folder every node mounts for the "
       "ingress logs")


def storage_unseen(config: RuntimeConfig,
                   ask: Callable[[str], Iterable[tuple[int, StorageMarks]]]) -> str | None:
    """Which executors do not find marks left from this process, or None: `ask(token)`
    gives each executor's index and what it found (`ExecutorAPI.marks_missing`)."""
    token = uuid.uuid4().hex
    leave_marks(config, token)
    try:
        answers = list(ask(token))
    finally:
        remove_marks(config, token)
    unseen = [f"executor {i} on node {marks.address} does not find a mark left in "
              f"{', '.join(marks.missing)}" for i, marks in answers if marks.missing]
    return "; ".join(unseen) or None
