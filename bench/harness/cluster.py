"""Ray and the pool, as the suites set them up and wait on them."""

from __future__ import annotations

import os
import time
from typing import Any


def ensure_ray() -> bool:
    """A private loopback Ray, unless Ray is already up; True if this call started it
    (the caller then shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    from cameo_actors.runtime import start_local_ray

    start_local_ray(num_cpus=16, log_to_driver=False)
    return True


def wait_finished(rt: Any, name: str, timeout_s: float) -> None:
    """Wait until dataflow `name` is finished (after its close)."""
    deadline = time.monotonic() + timeout_s
    while rt.describe(name, refresh=True)["state"] != "finished":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not finished {timeout_s:g} s after close")
        time.sleep(0.1)


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) so far of process `pid`; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pids: list[int], names: dict[int, str] | None = None) -> dict[str, float]:
    """CPU seconds (user + system) so far of the threads of `pids`, summed by thread name
    (`names` by thread id, else /proc/PID/task/TID/comm; `stat` fields 14-15 the ticks); a
    thread that ended since is missing, so compare two readings over a span no thread
    ends in."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = (names or {}).get(int(tid)) or f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def process_memory_mb(pid: int, field: str) -> float | None:
    """A memory figure of a process from /proc (`VmRSS`, or `VmHWM`: its peak), in MB;
    None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(f"{field}:")) / 1024
    except (OSError, StopIteration):
        return None
