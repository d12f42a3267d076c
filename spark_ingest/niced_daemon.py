"""Spark's Python daemon at a lower CPU priority (`SparkConfig.niceness`): the workers it
forks run the tasks' Python (the `cameo` writer and reader), and inherit its priority.

Spark starts it as `python -m spark_ingest.niced_daemon` (`spark.python.daemon.module`)
with the niceness in `NICENESS_ENV`; Python processes that Spark starts for its driver
(query planning, a stream reader's offsets) are not forked from it and keep the JVM's
priority, so that they connect back to the JVM within Spark's time limits however busy
the executors keep the machine.
"""

from __future__ import annotations

import os

#: The environment variable that carries the niceness to the daemon.
NICENESS_ENV = "CAMEO_SPARK_TASK_NICENESS"


def lower_to(niceness: int) -> None:
    """Lower this process to `niceness` (never raise it: that needs a privilege)."""
    now = os.nice(0)
    if niceness > now:
        os.nice(niceness - now)


if __name__ == "__main__":
    from pyspark import daemon

    lower_to(int(os.environ.get(NICENESS_ENV, "0")))
    daemon.manager()
