"""Executors' processes on the controller's own host, watched through the kernel.

A call to an executor whose process died learns of it from Ray 0.3-1.3 s later (measured
here, `bench.recovery`'s `detect_s`), and the liveness round asks every 0.2 s on top of
that. On Linux, a process's pidfd turns readable the moment it exits, so the controller
knows of a killed executor on its own host at once and its spare takes over; executors
on other hosts are still found by the liveness round.

An executor names its process (`identity`): the host (its boot id), the pid namespace,
the pid and the process's start time. The controller watches it only where the first
two are its own (so a pid means the same process: not in another container of the
machine), and only if the start time still matches once the pidfd is open (so the pid
was not reused meanwhile).
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)
#: How long the watch waits in the kernel before it looks for new processes to watch
#: and for the pool's stop.
POLL_MS = 100


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if it is not there): with
    its pid, it names one process for as long as the host runs."""
    stat = _read(f"/proc/{pid}/stat")
    # The command name (2nd field) is in parentheses and may hold spaces: split after it.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def identity(pid: int | None = None) -> str:
    """This process (or `pid` on this host) as "host/pid-namespace/pid/start"; "" where
    the kernel does not tell (not Linux)."""
    pid = os.getpid() if pid is None else pid
    host, started = _read("/proc/sys/kernel/random/boot_id"), _started(pid)
    return f"{host}/{_namespace()}/{pid}/{started}" if host and started else ""


def _watchable(process: str) -> int | None:
    """The pid of `process` (an `identity`) if this process can watch it: the same host
    and pid namespace."""
    host, ns, pid, started = (process.split("/") + ["", "", "", ""])[:4]
    mine = identity().split("/")
    if not started or not pid.isdigit() or mine[:2] != [host, ns]:
        return None
    return int(pid)


class ProcessWatch:
    """Calls `on_exit(index, incarnation, pid)` as soon as a watched executor's process
    exits (once per process).

    Args:
        on_exit: what an exit means (the controller: the executor is lost).
    """

    def __init__(self, on_exit: Callable[[int, str, int], None]) -> None:
        self.on_exit = on_exit
        self._lock = threading.Lock()
        #: pidfd -> (executor index, its incarnation, pid)
        self._watched: dict[int, tuple[int, str, int]] = {}
        #: (index, incarnation) pairs watched already, or found not watchable
        self._seen: set[tuple[int, str]] = set()
        self._poll = select.poll()

    def watch(self, index: int, incarnation: str, process: str) -> bool:
        """Watch executor `index`'s process (`process`: its `identity`) as `incarnation`;
        True if it is watched (now or already). Nothing for a process elsewhere, one
        already gone, or where the kernel has no pidfds."""
        key = (index, incarnation)
        with self._lock:
            if key in self._seen:
                return any(w[:2] == key for w in self._watched.values())
            self._seen.add(key)
        pid = _watchable(process)
        if pid is None or not hasattr(os, "pidfd_open"):
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already: the liveness round finds it
            return False
        if identity(pid) != process:  # the pid is another process's now
            os.close(fd)
            return False
        with self._lock:
            self._watched[fd] = (index, incarnation, pid)
            self._poll.register(fd, select.POLLIN)
        return True

    def watching(self) -> list[tuple[int, str, int]]:
        """(index, incarnation, pid) of each process watched now."""
        with self._lock:
            return sorted(self._watched.values())

    def check(self, timeout_ms: int = 0) -> list[tuple[int, str, int]]:
        """Wait up to `timeout_ms` for watched processes to exit; each that did is told
        to `on_exit` and no longer watched. Returns them."""
        exited = []
        for fd, _ in self._poll.poll(timeout_ms):
            with self._lock:
                found = self._watched.pop(fd, None)
                self._poll.unregister(fd)
            os.close(fd)
            if found is not None:
                exited.append(found)
        for index, incarnation, pid in exited:
            try:
                self.on_exit(index, incarnation, pid)
            except Exception:  # one bad notice must not stop the watch
                logger.exception("controller: handling the exit of executor %d failed", index)
        return exited

    def run(self, stopped: threading.Event) -> None:
        """Watch until `stopped` (the controller's loop)."""
        while not stopped.is_set():
            self.check(POLL_MS)
        with self._lock:
            for fd in self._watched:
                os.close(fd)
            self._watched.clear()
