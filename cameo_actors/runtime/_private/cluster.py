"""A private Ray on this machine's loopback only (the embedded default)."""

from __future__ import annotations

import os
from typing import Any

import ray
from ray._private import ray_constants

from cameo_actors.runtime.config import default_run_dir

NAMESPACE = "cameo"
_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def init_local_ray(run_dir: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> None:
    """Start a private local Ray bound to 127.0.0.1, its files under `run_dir/ray`.

    Ray otherwise advertises the host's network address even for a local
    cluster; a private runtime has no business on the network. Ray's own
    switch for that is read from the environment (inherited by the raylet and
    workers started here) and, in this already-imported process, from its
    constants.
    """
    run = os.path.join(run_dir or default_run_dir(), "ray")
    os.makedirs(run, exist_ok=True)
    cores = os.cpu_count() or 1
    # The raylet and its workers, and Spark's Python workers that join later, inherit it.
    # (A multi-node `ray start` refuses to run with it: set it to "1" for such a child.)
    os.environ[_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(address="local", num_cpus=num_cpus or 4 * cores, include_dashboard=False,
             namespace=NAMESPACE, _temp_dir=run, _node_ip_address="127.0.0.1",
             configure_logging=False, **kwargs)
