"""Starting or finding a pool: Ray started or joined, the storage of an earlier run of
the pool deleted or kept, the controller found (replaced if it runs other code) or
created. What `Runtime.start` does before it has a handle.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass, replace
from typing import Any

import ray

from cameo_actors.runtime._private import cluster
from cameo_actors.runtime._private.checkpoint.shared import FIX as SHARED_STORAGE_FIX
from cameo_actors.runtime._private.checkpoint.shared import storage_unseen
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.client.controller import RemoteController
from cameo_actors.runtime._private.cluster import NAMESPACE, controller_name
from cameo_actors.runtime._private.codebase import code_id
from cameo_actors.runtime._private.controller.actor import Controller
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor, gather
from cameo_actors.runtime.boundary import CALL_TIMEOUT_S
from cameo_actors.runtime.config import RuntimeConfig, default_run_dir, storage_not_shared
from cameo_actors.runtime.exceptions import PoolInUse, PoolKept, StorageNotShared

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenedPool:
    """A pool started or found: its controller, and how this process came to it.

    Attributes:
        controller: the controller actor's Ray handle.
        found: the pool was running before (its configuration is then its own).
        owns_ray: this process started or joined Ray for it.
        embedded: a private Ray of this process (the pool ends with it).
    """

    controller: Any
    found: bool
    owns_ray: bool
    embedded: bool


def open_pool(config: RuntimeConfig, pool: str, *, address: str | None, run_dir: str | None,
              num_cpus: int | None, node_ip: str, resume: bool) -> OpenedPool:
    """Start (or find) the pool `pool`, starting Ray first if needed (`Runtime.start`)."""
    given = config
    # Checkpoints, ingress logs and local copies under the run folder unless the config
    # says where.
    run = os.path.abspath(run_dir or default_run_dir())
    config = replace(
        config,
        checkpoint_url=config.checkpoint_url or os.path.join(run, "checkpoints", pool),
        ingress_log_dir=config.ingress_log_dir or os.path.join(run, "ingress", pool),
        local_recovery_dir=config.local_recovery_dir or os.path.join(run, "local", pool))
    storage = CheckpointStorage(config.checkpoint_url or "")
    storage.check_writable()  # fails here, clearly
    owns = False
    private = not ray.is_initialized() and address is None
    if private and not resume:  # no pool can run yet: refuse before Ray starts
        start_afresh(storage, config, pool)
    if not ray.is_initialized():
        if address is None:
            cluster.init_local(run_dir, num_cpus, node_ip=node_ip)
            if config.num_executors is None:
                config = replace(config, num_executors=os.cpu_count() or 1)
        else:
            cluster.join(address)
        owns = True
    running = cluster.find_actor(controller_name(pool))
    found = running is not None
    if running is not None and not private:
        replace_other_code(running, controller_name(pool))
    if not found and address is not None:
        problem = storage_not_shared(given, cluster.alive_nodes())
        if problem:
            raise StorageNotShared(problem)
    if not found and not resume and not private:
        start_afresh(storage, config, pool)
    # Ray restarts a controller that dies; it reads its registry back from storage.
    controller = Controller.options(
        name=controller_name(pool), namespace=NAMESPACE, lifetime="detached",
        max_restarts=-1, max_task_retries=-1, get_if_exists=True,
        **cluster.ON_THE_HEAD).remote(pool, config.to_dict(), resume)
    return OpenedPool(controller, found, owns, owns and address is None)


def start_afresh(storage: CheckpointStorage, config: RuntimeConfig, pool: str) -> None:
    """Before a new pool starts without `resume`: delete what an earlier run of it left
    (checkpoints, registry, ingress logs), unless that run was kept to be restored."""
    registry = storage.load_registry()
    if not registry:
        return
    names = sorted(registry.get("dataflows", {}))
    owner = registry.get("owner") or {}
    if owner.get("host") == socket.gethostname() and is_controller(owner.get("pid")):
        raise PoolInUse(
            f"pool {pool!r} in {config.checkpoint_url} is in use: its controller runs in "
            f"process {owner['pid']} on this machine (another script or service). Fix: "
            "give this pool another name (Runtime.start(pool=...)) or run folder (run_dir=), "
            "or stop that one first")
    if registry.get("resumable"):
        raise PoolKept(
            f"pool {pool!r} was kept to be restored with {len(names)} dataflow(s) "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) in "
            f"{config.checkpoint_url}. Fix: Runtime.start(resume=True) (or `cameo serve`) "
            "restores them; Runtime.start(pool=...) with another name starts a pool beside "
            "it; deleting that folder drops them")
    storage.discard_registry(names)
    for folder in (config.ingress_log_dir, config.local_recovery_dir):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    logger.info("pool %r starts empty: %d dataflow(s) of an earlier run deleted (%s); "
                "Runtime.start(resume=True) would have restored them", pool, len(names),
                ", ".join(names))


def is_controller(pid: Any) -> bool:
    """Whether process `pid` on this machine is a pool's controller (a Ray actor)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return f.read().startswith(b"ray::Controller")
    except (OSError, TypeError, ValueError):  # gone, or no /proc: nobody to protect
        return False


def replace_other_code(controller: Any, name: str, timeout_s: float = CALL_TIMEOUT_S) -> bool:
    """End the pool's controller if it runs other code than this process (an upgrade):
    Ray would start it again with its job's copy of the old classes, so it is ended for
    good, and the caller starts a new one, which reads the registry back from storage
    and adopts the executors (their dataflows run on meanwhile). True if it was ended."""
    try:
        theirs: str | None = RemoteController(controller).code_id()
    except AttributeError:  # a controller older than this call: other code too
        theirs = None
    except Exception as e:  # noqa: BLE001 - busy, or being restarted: left as it is
        logger.warning("the controller of %s did not say which code it runs (%s): kept",
                       name, type(e).__name__)
        return False
    if theirs == code_id():
        return False
    logger.warning("the controller of %s runs other code (%s, this is %s): replacing it",
                   name, theirs or "an older version", code_id())
    ray.kill(controller, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while cluster.find_actor(name) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def unshared_storage(config: RuntimeConfig, executors: list[Any], nodes: int) -> str | None:
    """Why a new pool's storage is not one that every executor's node reaches, or None (a
    folder of the same name on each node is a disk of each node's own)."""
    unseen = storage_unseen(config, lambda token: enumerate(gather(
        [Actor[ExecutorAPI](e).send(ExecutorAPI.marks_missing, token) for e in executors])))
    if unseen is None:
        return None
    return (f"starting a pool on a Ray cluster of {nodes} nodes: expected storage every "
            f"node reaches, got folders that are each node's own ({unseen}). "
            f"Fix: {SHARED_STORAGE_FIX}")
