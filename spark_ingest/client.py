"""A runtime handle inside Spark's Python processes.

The writer, the reader and their driver-side parts run in Spark's Python
worker processes, not in the process that started the runtime. Each such
process joins the Ray cluster once and finds the pool's named controller
(`Runtime.connect`); the handle is cached per process, because Spark reuses
its Python workers across tasks and micro-batches, so the join (about 0.1 s)
is paid once per worker, not per batch.

Why Ray and not another transport: the runtime's ingest path *is* a Ray
actor call (`Executor.ingest`, which blocks while the source's queue is
full). A writer that calls it directly gets the runtime's backpressure,
ordering (sequence numbers per client) and ingest-time stamping with no
extra hop; a gateway (HTTP, a socket) would add a copy and a second queue.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from spark_ingest.exceptions import OptionError
from spark_ingest.options import Connection

#: (address, pool) -> Runtime, per process: Spark reuses Python workers.
_HANDLES: dict[tuple[str, str], Any] = {}
PROBE_TIMEOUT_S = 3.0


def runtime(conn: Connection) -> Any:
    """The Runtime handle for this connection, joining Ray on first use in this process."""
    key = (conn.address, conn.pool)
    handle = _HANDLES.get(key)
    if handle is None:
        handle = _HANDLES[key] = _connect(conn)
    return handle


#: (address, pool, dataflow) -> (monotonic time, describe() info), per process.
_DESCRIBED: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
#: How stale a process's view of a dataflow (placement, deployment) may get. A Ray call
#: costs 5-20 ms on a busy 2-core machine, so not one per task per micro-batch.
DESCRIBE_MAX_AGE_S = 5.0


def describe(conn: Connection, dataflow: str, max_age_s: float = DESCRIBE_MAX_AGE_S
             ) -> tuple[Any, dict[str, Any]]:
    """(runtime, describe() info) of a dataflow, asking the controller again when this
    process's copy is older than `max_age_s` (0: always). Raises KeyError if not running."""
    import time

    rt = runtime(conn)
    key = (conn.address, conn.pool, dataflow)
    now = time.monotonic()
    cached = _DESCRIBED.get(key)
    if cached is None or now - cached[0] >= max_age_s:
        info = rt.describe(dataflow, refresh=True)
        _DESCRIBED[key] = cached = (now, info)
    return rt, cached[1]


def forget(conn: Connection) -> None:
    """Drop the cached handle (after the pool went away)."""
    _HANDLES.pop((conn.address, conn.pool), None)


def _connect(conn: Connection) -> Any:
    # Spark ends its Python workers with SIGTERM, routinely; Ray's crash handler would
    # print a "SIGTERM received" stack for each. Read when ray is first imported.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    from cameo_actors.runtime import PoolNotFound, Runtime

    _probe(conn.address)
    try:
        return Runtime.connect(pool=conn.pool, address=conn.address, auth=conn.ray_auth,
                               log_to_driver=False)
    except (ConnectionError, RuntimeError) as e:
        raise OptionError("address", "the Ray GCS address of the cluster running the pool",
                          conn.address, f"pass Runtime.address of the running pool ({e}); if "
                          "the cluster uses token auth, set option ray_auth=token") from e
    except PoolNotFound as e:
        raise OptionError("pool", "the name of a running cameo pool on that cluster", conn.pool,
                          f"pass the pool name given to Runtime.start(pool=...) ({e})") from e


def _probe(address: str) -> None:
    """Fail in seconds, naming the option, when nothing listens at the address
    (ray.init would retry for a long time first)."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        raise OptionError("address", "a reachable Ray GCS address (host:port)", address,
                          f"start the runtime first and pass its Runtime.address ({e})") from e
