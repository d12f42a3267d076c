"""Who used the machine's cores over a run: the runtime's executors, the rest of Ray,
Spark's JVM, Spark's Python workers, this process, and everything else (Linux's /proc).

    with CoreShares(jvm_pid, executor_pids) as shares:
        ...                                   # the run
    print(shares.render())                    # cores used per part over the run

A sampler thread reads each process's CPU time every `SAMPLE_S` (short-lived Python
workers included: a process's last sample counts), and the machine's from /proc/stat.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

#: How often the processes are looked at (s).
SAMPLE_S = 0.25
PARTS = ("executors", "ray (other)", "spark jvm", "spark python", "driver", "other")


def _ticks(pid: int) -> int | None:
    """CPU time (user + system, in clock ticks) of process `pid`, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _machine() -> tuple[int, int]:
    """(all ticks, busy ticks) of the machine so far."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(v) for v in f.readline().split()[1:8]]
    return sum(ticks), sum(ticks) - ticks[3] - ticks[4]  # idle, iowait


class CoreShares:
    """Cores each part of the system used while the `with` block ran (see the module).

    Args:
        jvm: Spark's JVM process (None: no local Spark); its descendants are its Python workers.
        executors: the runtime's executor processes.
    """

    def __init__(self, jvm: int | None, executors: Iterable[int]) -> None:
        self.jvm = jvm
        self.executors = set(executors)
        self.part: dict[int, str] = {}  # pid -> its part, decided when first seen
        self.first: dict[int, int] = {}  # pid -> ticks when first seen
        self.last: dict[int, int] = {}  # pid -> ticks when last seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cameo-core-shares", daemon=True)
        self.seconds = 0.0
        self.machine_busy = 0.0  # cores busy in all
        self._baseline = True  # the first look: what processes used before does not count

    def _classify(self, pid: int) -> str:
        if pid in self.executors:
            return "executors"
        if pid == os.getpid():
            return "driver"
        if pid == self.jvm:
            return "spark jvm"
        ancestor = _parent(pid)
        for _ in range(8):  # the daemon, the workers it forks, the runners of the driver
            if ancestor is None or ancestor <= 1:
                break
            if ancestor == self.jvm:
                return "spark python"
            ancestor = _parent(ancestor)
        cmd = _cmdline(pid)
        return "ray (other)" if ("ray" in cmd or "gcs_server" in cmd) else "other"

    def _sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            ticks = _ticks(pid)
            if ticks is None:
                continue
            if pid not in self.part:
                self.part[pid] = self._classify(pid)
                # Seen first after the start: all it used counts (a worker started meanwhile).
                self.first[pid] = ticks if self._baseline else 0
            self.last[pid] = ticks

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> CoreShares:
        self._t0 = time.monotonic()
        self._m0 = _machine()
        self._sample()
        self._baseline = False
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.seconds = time.monotonic() - self._t0
        all1, busy1 = _machine()
        all0, busy0 = self._m0
        self.machine_busy = (os.cpu_count() or 1) * (busy1 - busy0) / max(1, all1 - all0)

    def cores(self) -> dict[str, float]:
        """Part -> cores it used on average over the run; "other" is the machine's busy
        time that no listed process accounts for."""
        hz = os.sysconf("SC_CLK_TCK")
        used = dict.fromkeys(PARTS, 0.0)
        for pid, part in self.part.items():
            used[part] += (self.last[pid] - self.first[pid]) / hz / max(self.seconds, 1e-9)
        used["other"] = max(0.0, self.machine_busy - sum(v for k, v in used.items() if k != "other"))
        return used

    def render(self) -> str:
        c = self.cores()
        return (f"cores used over {self.seconds:.1f} s ({os.cpu_count()} in all, "
                f"{self.machine_busy:.2f} busy): "
                + ", ".join(f"{part} {c[part]:.2f}" for part in PARTS))
