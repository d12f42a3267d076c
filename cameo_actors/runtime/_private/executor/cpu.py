"""The executor's CPU, charged to the dataflows it hosts: what admission and the overload
report price work with (`controller/load.py`).

An executor's process spends CPU in two places. Its worker thread runs the operators
(and decodes what other executors send); that is charged to the dataflows by their share
of its busy time. Its other threads, Ray's, receive and decode the calls that bring events
in; that is charged by the calls each dataflow received. A call costs an executor about
a millisecond of CPU there, whatever it carries (`bench.push_cost`): priced by busy time
alone, a tenant of many small calls looks several times cheaper than it is. Busy time is
wall time, too: where the cores are shared it grows with the waiting for a core.

`host_cpu` reads the machine's CPU (Linux's `/proc`), so that the controller can tell what
the executors' host gives them (`LoadTracker.capacity`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from cameo_actors.runtime._private.executor_api import HostCpu


def host_cpu(worker_ms: float, clock: Callable[[], float] = time.monotonic) -> HostCpu:
    """This process's CPU and its host's now (`worker_ms`: the worker thread's CPU, read on
    that thread: `time.thread_time`)."""
    return HostCpu(at_s=clock(), process_ms=time.process_time() * 1000.0, worker_ms=worker_ms,
                   host=_host_id(), cores=_cores(), host_busy_ms=_host_busy_ms())


class CpuAccount:
    """Charges the executor's CPU since the last `charge` to its dataflows: the worker
    thread's by busy time, the rest of the process's by calls received. Cumulative per
    dataflow (`cpu_ms`, `calls_cpu_ms`), so that the controller takes rates from
    differences; a dataflow gone is forgotten.

    Example:
        >>> acct = CpuAccount()
        >>> acct.charge(0.0, 0.0, {"a": 0.0, "b": 0.0}, {"a": 0, "b": 0})
        {'a': (0.0, 0.0), 'b': (0.0, 0.0)}
        >>> acct.charge(100.0, 60.0, {"a": 30.0, "b": 10.0}, {"a": 10, "b": 30})
        {'a': (55.0, 10.0), 'b': (45.0, 30.0)}
    """

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None  # process ms, worker ms
        self._busy: dict[str, float] = {}
        self._calls: dict[str, int] = {}
        self._charged: dict[str, tuple[float, float]] = {}  # dataflow -> (cpu, calls' cpu)

    def charge(self, process_ms: float, worker_ms: float, busy_ms: Mapping[str, float],
               calls: Mapping[str, int]) -> dict[str, tuple[float, float]]:
        """Given the process's and worker thread's CPU now and each dataflow's busy ms and
        calls received so far: dataflow -> (CPU ms charged to it so far, of which for its
        calls)."""
        d_busy = {n: max(0.0, b - self._busy.get(n, b)) for n, b in busy_ms.items()}
        d_calls = {n: max(0, c - self._calls.get(n, c)) for n, c in calls.items()}
        last = self._last
        self._last = (process_ms, worker_ms)
        self._busy, self._calls = dict(busy_ms), dict(calls)
        self._charged = {n: self._charged.get(n, (0.0, 0.0)) for n in busy_ms}
        if last is None:
            return dict(self._charged)
        worker = max(0.0, worker_ms - last[1])
        rest = max(0.0, process_ms - last[0] - worker)
        by_busy, by_calls = _shares(d_busy), _shares(d_calls) or _shares(d_busy)
        for n in self._charged:
            cpu, on_calls = self._charged[n]
            spent = rest * by_calls.get(n, 0.0)
            self._charged[n] = (cpu + worker * by_busy.get(n, 0.0) + spent, on_calls + spent)
        return dict(self._charged)


def _shares(amounts: Mapping[str, float]) -> dict[str, float]:
    total = sum(amounts.values())
    return {n: a / total for n, a in amounts.items()} if total > 0 else {}


# -- the host (Linux; elsewhere unknown) ------------------------------------------------
def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return os.uname().nodename


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _host_busy_ms() -> float | None:
    """The machine's CPU time not idle and not waiting for I/O, every core, in ms."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is within user)
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy * 1000.0 / os.sysconf("SC_CLK_TCK")
