"""The CPU meter counts the driver and every process below it, including one that
starts and exits during the run, by role."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
import time

from bench.harness import cpu
from bench.harness.cpu import ROLES, CpuMeter, descendants, read_procs, role_of

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def spin(seconds: float) -> None:
    """Use `seconds` of CPU on this thread (a busy loop: no sleep)."""
    began = time.process_time()
    while time.process_time() - began < seconds:
        pass


def test_the_driver_and_a_child_that_exits_during_the_run_are_counted() -> None:
    with CpuMeter(period_s=0.05) as meter:
        spin(0.3)
        subprocess.run([sys.executable, "-c", SPIN.format(s=0.4)], check=True)
    by_role = meter.by_role()
    assert set(by_role) == set(ROLES)
    assert by_role["driver"] >= 0.25
    assert by_role["other"] >= 0.3  # the child (a plain python), though it exited
    assert meter.total_s() == round(sum(by_role.values()), 3)
    s = meter.summary(events=1000)
    assert s["cpu_s"] == meter.total_s() and s["events_per_cpu_s"] == round(1000 / s["cpu_s"])
    assert s["wall_s"] >= 0.6 and 0 < s["cores_busy"] <= 2.5


def test_cpu_used_before_the_run_is_not_counted() -> None:
    spin(0.3)
    with CpuMeter(period_s=0.05) as meter:
        pass
    assert meter.by_role()["driver"] < 0.2


def test_the_tree_and_the_roles() -> None:
    procs = read_procs()
    mine = descendants(procs, os.getpid())
    assert os.getpid() in mine and 1 not in mine
    assert role_of(5, "gcs_server", ["/x/ray/core/src/ray/gcs/gcs_server"], root=1) == "ray"
    assert role_of(5, "ray::Controller", ["ray::Controller_ab.monitor"], root=1) == \
        "controller"
    assert role_of(5, "python", ["python", "-m", "pyspark.daemon"], root=1) == "spark"
    assert role_of(6, "python", ["python", "-m", "spark_ingest.niced_daemon"], root=1) == "spark"
    assert role_of(5, "bash", ["bash"], root=1) == "other"
    assert doctest.testmod(cpu).failed == 0
