"""Ray, in one place: starting a private local Ray or joining a cluster, the
namespace every cameo actor lives in, and calls with a timeout.

Every process that talks to a pool (the driver, `cameo serve`, Spark's Python
workers, the benchmarks) comes through here, so they all find the same named
actors and none waits forever on a dead executor.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import ray

from cameo_actors.runtime.boundary import CALL_TIMEOUT_S
from cameo_actors.runtime.config import RAY_SYSTEM_CONFIG, ray_temp_dir
from cameo_actors.runtime.exceptions import RuntimeUnavailable

logger = logging.getLogger(__name__)

#: The Ray namespace of every cameo actor (controllers, executors).
NAMESPACE = "cameo"
# Ray's switch that makes a single-machine cluster keep the addresses it is given.
_SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def controller_name(pool: str) -> str:
    return f"cameo-controller-{pool}"


def executor_name(pool: str, index: int) -> str:
    return f"cameo-{pool}-executor-{index}"


def init_local(run_dir: str | None = None, num_cpus: int | None = None, *,
               node_ip: str = "127.0.0.1", **kwargs: Any) -> None:
    """Start a private local Ray bound to `node_ip` (loopback by default), its files
    under `run_dir/ray` (see `ray_temp_dir`).

    Ray otherwise advertises the host's network address even for a local
    cluster; a private runtime has no business on the network. Ray's own
    switch for that is read from the environment (inherited by the raylet and
    workers started here, and by Spark's Python workers that join later) and,
    in this already-imported process, from its constants. (A multi-node
    `ray start` refuses to run with it: set it to "1" for such a child.)
    """
    run = ray_temp_dir(run_dir)
    if node_ip in ("127.0.0.1", "localhost"):
        from ray._private import ray_constants

        os.environ[_SINGLE_MACHINE] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
    kwargs.setdefault("configure_logging", False)
    ray.init(address="local", num_cpus=num_cpus or 4 * (os.cpu_count() or 1),
             include_dashboard=False, namespace=NAMESPACE, _temp_dir=run,
             _node_ip_address=node_ip, _system_config=RAY_SYSTEM_CONFIG, **kwargs)


def join(address: str, *, auth: str = "auto", log_to_driver: bool = True) -> None:
    """Join a running Ray cluster ("auto", "host:port", "ray://host:10001")."""
    set_auth_mode(auth)
    ray.init(address=address, namespace=NAMESPACE, configure_logging=False,
             log_to_driver=log_to_driver)


def set_auth_mode(mode: str) -> None:
    """Ray's token auth: a process that joins by explicit address must be told the
    mode ("token" or "disabled"); Ray does not guess. "auto" turns it on when a
    token is there (what `ray.init()` does for a local cluster), unless
    RAY_AUTH_MODE says otherwise."""
    if mode == "auto":
        if "RAY_AUTH_MODE" in os.environ:
            return
        token_file = os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token")
        mode = "token" if os.environ.get("RAY_AUTH_TOKEN") or Path(token_file).exists() \
            else "disabled"
    if os.environ.get("RAY_AUTH_MODE") == mode:
        return
    os.environ["RAY_AUTH_MODE"] = mode
    if "ray._raylet" in sys.modules:  # Ray read its config already: make it read the mode again
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")


def gcs_address() -> str | None:
    """The address of the cluster this process is on, or None when not connected."""
    if not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().gcs_address)


#: Actor options that place an actor on the head node, needing no CPU there (a head is
#: often started with none). Ray gives the head, and a head started again in its place,
#: this resource: a pool's controller goes there, since the head's loss is the cluster's,
#: and a worker node's loss then never takes the control plane with it. (A soft affinity
#: to the head's node id let Ray place the controller on a worker now and then.)
HEAD_RESOURCE = "node:__internal_head__"
ON_THE_HEAD: dict[str, Any] = {"num_cpus": 0, "resources": {HEAD_RESOURCE: 0.001}}


def find_actor(name: str) -> Any | None:
    """A named cameo actor of this cluster, or None."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def info() -> dict[str, Any]:
    """Ray's side of a pool's description: live nodes and whether token auth is on."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        token_auth: bool | None = bool(is_token_auth_enabled())
    except ImportError:  # a Ray without token auth
        token_auth = None
    return {"token_auth": token_auth, "nodes": alive_nodes()}


def nodes() -> list[dict[str, Any]]:
    """Ray's view of its nodes (the stubs leave `ray.nodes` untyped)."""
    return list(ray.nodes())  # type: ignore[no-untyped-call]


def alive_nodes() -> int:
    return len([n for n in nodes() if n.get("Alive")])


def node_ip() -> str:
    """The address of this process's node."""
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def cluster_cpus() -> float:
    """The CPUs of the whole cluster."""
    return float(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]


def drain_node(node_id: str, why: str, timeout_s: float = CALL_TIMEOUT_S) -> str | None:
    """Tell Ray that node `node_id` (hex) is going: no new actor or task is placed there,
    and its raylet leaves once idle. Ray's drain call (the one its autoscaler makes for
    preemption) is internal, so a Ray without it is answered, not raised: the reason it
    was not drained, or None. The head is never drained: the controller restarts there."""
    try:
        if any(n["NodeID"] == node_id and HEAD_RESOURCE in n.get("Resources", {})
               for n in nodes()):
            return "the head node stays open at Ray: the pool's controller restarts there"
        from ray.core.generated import autoscaler_pb2

        gcs = ray._private.worker.global_worker.gcs_client  # type: ignore[attr-defined]
        preemption = autoscaler_pb2.DRAIN_NODE_REASON_PREEMPTION  # type: ignore[attr-defined]
        accepted, refused = gcs.drain_node(node_id, preemption, why, 0, timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - an internal API: any failure is an answer
        return f"{type(e).__name__}: {e}"
    return None if accepted else str(refused or "refused")


def unwrap(e: Exception) -> Exception:
    """A Ray task error -> the exception the actor raised (SpecError etc.)."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, Exception) else e


def get(refs: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """`ray.get` with a timeout, re-raising what the actor raised."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RuntimeUnavailable(f"the pool did not answer within {timeout_s:g} s: an executor "
                                 "died or is overloaded; see `cameo executors`") from None
    except ray.exceptions.RayTaskError as e:
        raise unwrap(e) from None
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
        # An executor (or the controller) died: say which call could not be answered and why.
        first = (str(e).strip().splitlines() or [""])[0]
        raise RuntimeUnavailable(f"a part of the pool is gone ({type(e).__name__}: {first}); "
                                 "the dataflows it hosted are restored from their last "
                                 "checkpoint, the others go on") from None


def get_each(refs: list[Any], timeout_s: float = CALL_TIMEOUT_S) -> list[Any]:
    """Each call's answer, or None for one that failed or did not answer in time."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    done = set(ready)
    out: list[Any] = []
    for ref in refs:
        try:
            out.append(ray.get(ref, timeout=0) if ref in done else None)
        except Exception:  # ended meanwhile: the caller takes what answers
            out.append(None)
    return out
