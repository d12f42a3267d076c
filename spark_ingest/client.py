"""A runtime handle inside Spark's Python processes.

The writer, the reader and their driver-side parts run in Spark's Python
worker processes, not in the process that started the runtime. Each such
process joins the Ray cluster once (`ray.init(address=<GCS address>,
namespace="cameo")`) and finds the pool's named controller
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
from pathlib import Path
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
    _set_auth_mode(conn.ray_auth)
    # Spark ends its Python workers with SIGTERM, routinely; Ray's crash handler would
    # print a "SIGTERM received" stack for each. Read when ray is first imported.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    import ray

    from cameo_actors.errors import CameoError
    from cameo_actors.runtime.api import Runtime

    if not ray.is_initialized():
        _probe(conn.address)
        try:
            ray.init(address=conn.address, namespace="cameo", log_to_driver=False,
                     configure_logging=False, include_dashboard=False)
        except (ConnectionError, RuntimeError) as e:
            raise OptionError("address", "the Ray GCS address of the cluster running the pool",
                              conn.address, f"pass Runtime.address of the running pool ({e}); if "
                              "the cluster uses token auth, set option ray_auth=token") from e
    elif conn.address not in ("auto",) and _gcs_address() not in (conn.address, None):
        raise OptionError("address", f"the cluster this process is on ({_gcs_address()})",
                          conn.address, "one Spark application talks to one Ray cluster")
    try:
        return Runtime.connect(pool=conn.pool, address=conn.address)
    except CameoError as e:
        raise OptionError("pool", "the name of a running cameo pool on that cluster", conn.pool,
                          f"pass the pool name given to Runtime.start(pool=...) ({e})") from e


def _gcs_address() -> str | None:
    import ray

    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # not connected
        return None


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


def _set_auth_mode(mode: str) -> None:
    """Ray's token auth: a process that joins by explicit address must be told the mode.
    "auto" turns it on when a token is there (what `ray.init()` does for a local cluster)."""
    if mode == "auto":
        if "RAY_AUTH_MODE" in os.environ:
            return
        has_token = bool(os.environ.get("RAY_AUTH_TOKEN")) or \
            Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token")).exists()
        mode = "token" if has_token else "disabled"
    if os.environ.get("RAY_AUTH_MODE") == mode:
        return
    os.environ["RAY_AUTH_MODE"] = mode
    import sys

    if "ray._raylet" in sys.modules:  # Ray read its config already: make it read the mode again
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")
