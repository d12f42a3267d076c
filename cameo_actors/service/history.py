"""Ended dataflows as the service last showed them, kept in the service's own folder so
that they outlive the pool: a pool stopped for good forgets its registry and checkpoints,
an embedded Ray ends with the service, but the console and the API still answer for the
dataflows that ended before, after any restart.

One JSON file per dataflow (its name, quoted, as the file's): its list entry, status,
spec, graph, checkpoints, time line and exceptions, each as the API answered it when it
was kept. Bounded by count and by age, as the pool bounds what it keeps of ended ones.
A file that does not read is skipped with a warning: the rest stay readable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import quote

from cameo_actors.runtime.boundary import DataflowSummary

log = logging.getLogger("cameo.service")

#: The parts of a kept record, each an API answer of its own.
PARTS = ("summary", "status", "spec", "graph", "checkpoints", "timeline", "exceptions")


class History:
    """Ended dataflows' records, in memory and (given a folder) on disk.

    Args:
        folder: where the records are written (None: kept in memory only).
        kept: at most this many; the oldest ended go first.
        retention_s: none kept longer than this after it ended.
        now: the time (epoch seconds), as the pool's records have it.
    """

    def __init__(self, folder: str | None, kept: int = 1000,
                 retention_s: float = 7 * 24 * 3600.0,
                 now: Callable[[], float] = time.time) -> None:
        self.folder, self.kept, self.retention_s, self.now = folder, kept, retention_s, now
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        if folder is not None:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            for entry in sorted(os.listdir(folder)):
                if entry.endswith(".json"):
                    self._load(os.path.join(folder, entry))
        self.expire()

    def _load(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            self._records[record["summary"]["name"]] = record
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("history: %s does not read (%s); skipped", path, e)

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._records.get(name)

    def has(self, name: str, ended_at: float | None) -> bool:
        """Whether this end of the dataflow (a name ends once per deployment) is kept."""
        record = self.get(name)
        return record is not None and record["summary"].get("ended_at") == ended_at

    def summaries(self) -> list[DataflowSummary]:
        with self._lock:
            return [cast(DataflowSummary, dict(r["summary"])) for r in self._records.values()]

    def keep(self, record: dict[str, Any]) -> None:
        """Keep an ended dataflow's record (replacing an earlier end of the same name),
        written whole or not at all."""
        missing = [p for p in PARTS if p not in record]
        if missing:
            raise ValueError(f"history: a record without {missing}")
        name = record["summary"]["name"]
        if self.folder is not None:
            path = self._path(name)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(record, f, separators=(",", ":"))
            os.replace(path + ".tmp", path)
        with self._lock:
            self._records[name] = record
        self.expire()

    def expire(self) -> None:
        """Forget the records beyond the newest `kept`, or older than `retention_s`."""
        now = self.now()
        with self._lock:
            ended = sorted(self._records.values(),
                           key=lambda r: r["summary"].get("ended_at") or 0.0)
            gone = [r for i, r in enumerate(ended)
                    if i < len(ended) - self.kept
                    or now - (r["summary"].get("ended_at") or now) > self.retention_s]
            for r in gone:
                del self._records[r["summary"]["name"]]
        for r in gone:
            if self.folder is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(r["summary"]["name"]))

    def _path(self, name: str) -> str:
        assert self.folder is not None
        return os.path.join(self.folder, quote(name, safe="") + ".json")
