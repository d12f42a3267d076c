"""Where a benchmark's figures go: a JSON file when one was asked for (`--json F`), with
what it was measured on (`measured_on`), and the lines it prints."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from typing import Any

#: The repository the benchmarks run from (its commit is the code measured).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measured_on() -> dict[str, Any]:
    """The run's commit (and whether the tree had changes), date, command, machine (cores,
    CPU model, memory) and the load average as it ends: what a reader needs to weigh a
    figure, and to measure it again."""
    def git(*args: str) -> str | None:
        try:
            run = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO)
        except OSError:  # no git here
            return None
        return run.stdout.strip() if run.returncode == 0 else None

    cpu_model = memory_gb = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f
                              if line.startswith("model name")), None)
        with open("/proc/meminfo") as f:
            memory_gb = round(int(f.readline().split()[1]) / 2**20, 1)  # MemTotal, kB
    except OSError:
        pass
    # Results an earlier run of a chain wrote are not a change to the code measured.
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 ":(exclude)bench/results")
    script = os.path.basename(sys.argv[0])
    if script == "__main__.py":  # python -m PACKAGE: the package names the command
        script = os.path.basename(os.path.dirname(sys.argv[0]))
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "argv": [script, *sys.argv[1:]],
            "nproc": os.cpu_count(), "cpu_model": cpu_model, "memory_gb": memory_gb,
            "loadavg_1m_end": round(os.getloadavg()[0], 2), "python": platform.python_version()}


def save_json(path: str | None, figures: Any) -> None:
    """Write `figures` to `path` (indented JSON, its folder made if missing: a run of
    half an hour must not be lost to it), a dict with `measured_on` added; nothing when
    no path was given."""
    if path:
        if isinstance(figures, dict):
            figures = {**figures, "measured_on": measured_on()}
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)


def format_ms(v: float | None) -> str:
    """A latency for a printed line: whole ms, "-" when there is none."""
    return "-" if v is None else f"{v:,.0f} ms"
