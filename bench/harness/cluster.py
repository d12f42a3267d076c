"""Ray and the pool, as the suites set them up and wait on them."""

from __future__ import annotations

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


def process_memory_mb(pid: int, field: str) -> float | None:
    """A memory figure of a process from /proc (`VmRSS`, or `VmHWM`: its peak), in MB;
    None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(f"{field}:")) / 1024
    except (OSError, StopIteration):
        return None
