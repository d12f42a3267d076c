"""CPU seconds as a cluster pays them: every process a run uses, by role.

A throughput per executor core leaves out the driver that encodes and sends every
batch, the controller, and Ray's raylet, GCS and idle workers; on a cluster each of
them takes a core's share too. `CpuMeter` counts the CPU time (user + system) of the
driver and every process descended from it (a Ray or a Spark this process started:
raylet, GCS, the executors and controller as actors, Spark's JVM and Python workers),
sampled from /proc while the run goes on, so that a process that starts or exits
during the run counts too (an exit loses at most its last `period_s`). Events per CPU
second of all of them is the figure that carries to a cluster.

>>> role_of(41, "python", ["python", "-m", "bench.throughput"], root=41)
'driver'
>>> role_of(7, "ray::Executor_9f", ["ray::Executor_9f.ingest"], root=1)
'executors'
>>> role_of(8, "java", ["java", "-cp", "...", "org.apache.spark.deploy.SparkSubmit"], root=1)
'spark'
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

#: The roles a process of a run takes, in the order they are printed.
ROLES = ("driver", "executors", "controller", "ray", "spark", "other")
_TICK = os.sysconf("SC_CLK_TCK")


class Proc(NamedTuple):
    ppid: int
    comm: str
    cpu_s: float  # user + system so far, its own (not its children's)


def read_procs() -> dict[int, Proc]:
    """Every process on the machine now: pid -> parent, name and CPU seconds so far."""
    out: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:  # exited meanwhile
            continue
        fields = rest.split()  # after the command name: state, ppid, ...
        out[int(name)] = Proc(int(fields[1]), head.split("(", 1)[1],
                              (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def descendants(procs: dict[int, Proc], root: int) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def role_of(pid: int, comm: str, argv: Iterable[str], *, root: int) -> str:
    """Which part of a run a process is (`ROLES`), from its name and command line."""
    if pid == root:
        return "driver"
    line = " ".join(argv)
    if comm.startswith("ray::Executor") or line.startswith("ray::Executor"):
        return "executors"
    if comm.startswith("ray::Controller") or line.startswith("ray::Controller"):
        return "controller"
    # Spark's Python workers start as pyspark.daemon, or the tier's own niced daemon.
    if comm == "java" or any(s in line for s in ("org.apache.spark", "pyspark", "spark_ingest")):
        return "spark"
    if "ray" in line or comm.startswith(("raylet", "gcs_server", "ray::")):
        return "ray"
    return "other"


class CpuMeter:
    """The CPU seconds every process of a run used between `start` and `stop` (or a
    `with` block), by role; `root` is the driver (default: this process)."""

    def __init__(self, root: int | None = None, period_s: float = 0.5) -> None:
        self.root = os.getpid() if root is None else root
        self.period_s = period_s
        self._first: dict[int, float] = {}  # pid -> CPU s when first seen (0: born in the run)
        self._last: dict[int, float] = {}
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.wall_s = 0.0

    def __enter__(self) -> CpuMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> CpuMeter:
        self._t0 = time.perf_counter()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """Stop sampling (a last sample now); returns `by_role()`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.wall_s = time.perf_counter() - self._t0
        return self.by_role()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def _sample(self, first: bool = False) -> None:
        procs = read_procs()
        for pid in descendants(procs, self.root):
            p = procs[pid]
            if pid not in self._roles:
                self._roles[pid] = role_of(pid, p.comm, cmdline(pid), root=self.root)
                self._first[pid] = p.cpu_s if first else 0.0
            self._last[pid] = max(self._last.get(pid, 0.0), p.cpu_s)

    def by_role(self) -> dict[str, float]:
        """CPU seconds used per role (every role, 0.0 where none ran)."""
        out = dict.fromkeys(ROLES, 0.0)
        for pid, role in self._roles.items():
            out[role] += self._last[pid] - self._first[pid]
        return {r: round(s, 3) for r, s in out.items()}

    def total_s(self) -> float:
        return round(sum(self.by_role().values()), 3)

    def summary(self, events: int) -> dict[str, Any]:
        """The figures a benchmark reports: events per CPU second of the whole run, the
        CPU seconds by role, the wall time, and the cores the run kept busy on average."""
        total = self.total_s()
        return {"events_per_cpu_s": round(events / total) if total > 0 else None,
                "cpu_s": total, "cpu_s_by_role": self.by_role(), "wall_s": round(self.wall_s, 3),
                "cores_busy": round(total / self.wall_s, 2) if self.wall_s > 0 else None}
