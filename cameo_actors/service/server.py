"""`cameo serve`: Ray, the executor pool, the RPC API and /metrics in one process.

Start-up: start an embedded private Ray (default) or join a cluster, find or
create the pool's detached controller (so dataflows that outlived an earlier
service process are picked up), then serve HTTP with uvicorn.

Shutdown on SIGTERM (or Ctrl-C): uvicorn stops accepting and finishes the
requests in flight; then, with `--on-shutdown stop` (the default), every
dataflow's sources are closed, the backlog drains for up to
`--drain-timeout` seconds, each dataflow is cancelled and a line says how it
ended. With `--on-shutdown keep` in a joined cluster the dataflows keep
running in the detached controller for the next service process; in the
embedded Ray they stop at their last checkpoint, and the next service
restores them from it (as it does after a crash).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from cameo_actors.errors import CameoError
from cameo_actors.operators.base import Event
from cameo_actors.runtime.boundary import LIVE_STATES, Pressure, Rejected
from cameo_actors.service.auth import TokenStore, write_private
from cameo_actors.service.config import ServiceConfig
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.limits import TenantLimits

if TYPE_CHECKING:
    from cameo_actors.runtime.api import Runtime

log = logging.getLogger("cameo.service")
#: How long the service trusts what it learnt of a dataflow's backpressure (seconds).
PRESSURE_TTL_S = 0.1


class ServiceRuntime:
    """The runtime as the service drives it (`core.CoreRuntime`): a `Runtime`, with one
    handle per dataflow for its events. A handle's batches are applied in order per
    executor, so a shared handle would let one dataflow's backpressure hold back every
    other dataflow on the same executor. A push is answered once its events are in their
    sources' ingress logs (it survives a failure from then on); one dataflow's pushes go
    one at a time.

    The runtime's calls that the service makes unchanged are bound below, one by one (a
    new one is added here and to `CoreRuntime`); cancel, push, close, pressure and
    wait_idle change how they go, and are this class's own methods.
    """

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.pool = rt.pool
        self._pushers: dict[str, tuple[Runtime, threading.Lock]] = {}
        self._pushers_guard = threading.Lock()
        # name -> (when asked, the runtime's answer, events pushed since)
        self._pressure: dict[str, tuple[float, Pressure, int]] = {}
        # control
        self.deploy, self.predict, self.update = rt.deploy, rt.predict, rt.update
        self.list, self.describe, self.stats = rt.list, rt.describe, rt.stats
        self.executor_stats, self.explain = rt.executor_stats, rt.explain
        # live reconfiguration, and the scaling controller (`scaling.ScalingRuntime`)
        self.scale, self.migrate, self.migrations = rt.scale, rt.migrate, rt.migrations
        self.rebalance = rt.rebalance
        self.add_executors, self.remove_executor = rt.add_executors, rt.remove_executor
        self.drain_node = rt.drain_node
        self.scaling, self.set_scaling = rt.scaling, rt.set_scaling
        # outputs: read with offsets, committed by their readers
        self.result_offsets, self.read_results = rt.result_offsets, rt.read_results
        self.read_result_columns = rt.read_result_columns
        self.commit_results = rt.commit_results
        self.error_offsets, self.read_errors = rt.error_offsets, rt.read_errors
        self.commit_errors = rt.commit_errors

    def _pusher(self, name: str) -> tuple[Runtime, threading.Lock]:
        with self._pushers_guard:
            pusher = self._pushers.get(name)
            if pusher is None:
                pusher = self._pushers[name] = (self.rt.handle(), threading.Lock())
            return pusher

    def cancel(self, name: str) -> dict[str, Any]:
        result = self.rt.cancel(name)
        with self._pushers_guard:
            self._pushers.pop(name, None)
        self._pressure.pop(name, None)
        return result

    def push(self, name: str, source: str, events: Sequence[Event], **kwargs: Any
             ) -> list[Rejected]:
        handle, lock = self._pusher(name)
        with lock:
            rejected = handle.push(name, source, events, **kwargs)
            handle.flush()
            cached = self._pressure.get(name)  # one push at a time per dataflow: no race
            if cached is not None:
                self._pressure[name] = (cached[0], cached[1], cached[2] + len(events))
            return rejected

    def close(self, name: str) -> None:
        handle, lock = self._pusher(name)
        with lock:
            handle.close(name)  # after that dataflow's events, in order

    def pressure(self, name: str) -> Pressure:
        """The runtime's answer, reused for `PRESSURE_TTL_S`: a push asks before sending,
        and a burst of pushes should not each cost a round of calls. The events pushed
        since the answer count against its sinks' room, so that a burst cannot fill a
        log past its bytes before the answer is renewed."""
        now = time.monotonic()
        cached = self._pressure.get(name)
        if cached is None or now - cached[0] > PRESSURE_TTL_S:
            cached = self._pressure[name] = (now, self.rt.pressure(name), 0)
        _, answer, pushed = cached
        if not pushed:
            return answer
        full = {s for s, room in answer["rooms"].items() if room <= pushed}
        return {**answer, "full_sinks": sorted(full | set(answer["full_sinks"]))}

    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None:
        with self._pushers_guard:
            pushers = list(self._pushers.values())
        for handle, lock in pushers:
            try:
                with lock:
                    handle.flush()  # every pushed batch accepted, then the executors drain
            except Exception as e:  # a refused batch (e.g. cancelled meanwhile): drain the rest
                log.warning("a pushed batch was not accepted: %s", e)
        self.rt.wait_idle(timeout_s=timeout_s, dataflows=dataflows)


def serve(cfg: ServiceConfig) -> int:
    """Run the service until SIGTERM / SIGINT; returns the process exit code."""
    from cameo_actors.service.view import UtcIsoFormatter

    handler = logging.StreamHandler(sys.stderr)  # times in ISO 8601 UTC, as the CLI shows them
    handler.setFormatter(UtcIsoFormatter("%(asctime)s cameo %(levelname)s %(message)s"))
    logging.basicConfig(level=cfg.log_level.upper(), handlers=[handler])
    state_dir = cfg.resolved_state_dir
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o700)
    tokens, generated = TokenStore.open(state_dir, cfg.resolved_admin_token_file, cfg.admin_token,
                                        max_per_tenant=cfg.max_tokens_per_tenant,
                                        max_total=cfg.max_tokens)
    if generated:
        log.info("generated the admin token in %s (readable by this user only)",
                 cfg.resolved_admin_token_file)

    # Try the port first: a taken one fails now, not after Ray started. (Uvicorn binds it
    # again itself: handing it this socket would lose TCP_NODELAY on the connections.)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((cfg.host, cfg.port))
            host, port = probe.getsockname()[:2]
    except OSError as e:
        log.error("cannot listen on %s:%s (%s). Fix: pick another --port or stop the process "
                  "using it", cfg.host, cfg.port, e)
        return 2
    url = f"http://{host}:{port}"

    from cameo_actors.runtime import Runtime, RuntimeConfig
    from cameo_actors.runtime.exceptions import StorageNotShared

    t0 = time.monotonic()
    executors = cfg.executors or ((os.cpu_count() or 1) if cfg.embedded else None)
    config = RuntimeConfig(num_executors=executors, policy=cfg.policy,
                           allowed_modules=cfg.allowed_modules,
                           max_windows_per_event=cfg.max_windows_per_event, bins=cfg.bins,
                           state_budget_bytes=cfg.state_budget_bytes,
                           max_state_bytes=cfg.max_state_bytes,
                           max_string_chars=cfg.max_string_chars,
                           ended_retention_s=cfg.keep_ended_s,
                           checkpoint_url=cfg.checkpoint_url,
                           ingress_log_dir=cfg.ingress_log_dir,
                           checkpoint_interval_s=cfg.checkpoint_interval_s,
                           replace_lost_after_s=cfg.replace_lost_after_s,
                           delivery=cfg.delivery, admission=cfg.admission,
                           tenant_floor=cfg.tenant_floor == "on", scaling=dict(cfg.scaling))
    try:
        # The service restores what its run folder kept (a restart, a crash): on purpose.
        rt = Runtime.start(config, pool=cfg.pool, address=None if cfg.embedded else cfg.address,
                           run_dir=cfg.run_dir, num_cpus=cfg.num_cpus, node_ip=cfg.node_ip,
                           resume=True)
    except StorageNotShared as e:
        log.error("%s", e)
        return 1
    except (ConnectionError, RuntimeError, ValueError) as e:
        log.error("cannot start or join Ray (address %s): %s. Fix: check --address / "
                  "RAY_ADDRESS and that Ray's token (~/.ray/auth_token or RAY_AUTH_TOKEN) "
                  "matches the cluster's", cfg.address or "embedded", e)
        return 1
    pool_existed = rt.found
    found = rt.list(LIVE_STATES)
    log.info("Ray %s at %s; pool %r %s with %d executors (policy %s) in %.1f s",
             "embedded" if cfg.embedded else "joined", rt.address,
             cfg.pool, "found" if pool_existed else "started", len(rt.executors), rt.config.policy,
             time.monotonic() - t0)
    if pool_existed and rt.config.policy != cfg.policy:
        log.warning("the running pool %r uses policy %s, not %s: a pool keeps the configuration "
                    "it was started with", cfg.pool, rt.config.policy, cfg.policy)
    if pool_existed and cfg.scaling and rt.config.scaling != cfg.scaling:
        log.warning("the running pool %r scales with %s, not %s: a pool keeps the "
                    "configuration it was started with", cfg.pool, rt.config.scaling or "policy off",
                    cfg.scaling)
    if found:
        log.info("found %d dataflow(s) still running: %s", len(found),
                 ", ".join(f"{d['name']} (tenant {d['tenant']})" for d in found))

    signals: list[int] = []

    def remember(sig: int, _frame: FrameType | None) -> None:
        # Uvicorn re-raises the signal it stopped on once it is done; we take it from
        # there (drain, cancel, say so) instead of Ray's handler, which exits at once.
        signals.append(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, remember)  # after ray.init, which installs its own
    core = ServiceCore(ServiceRuntime(rt), allowed_modules=rt.config.allowed_modules)
    from cameo_actors.service.app import create_app

    app = create_app(core, tokens, max_spec_bytes=cfg.max_spec_bytes,
                     max_body_bytes=cfg.max_body_bytes, max_json_depth=cfg.max_json_depth,
                     snapshot=rt.stats_all, scaling=rt.scaling,
                     info=rt.cluster_info,
                     limits=TenantLimits(max_concurrent=cfg.tenant_max_concurrent,
                                         rate_per_s=cfg.tenant_rate, burst=2 * cfg.tenant_rate))
    import uvicorn

    service_file = os.path.join(state_dir, "service.json")

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # listening now: tell clients (and people) where
                write_private(service_file, json.dumps({"url": url, "pid": os.getpid(),
                                                        "pool": cfg.pool}))
                log.info("serving the API on %s (OpenAPI at %s/openapi.json, metrics at "
                         "%s/metrics)", url, url, url)

    server = Server(uvicorn.Config(
        app, host=host, port=port, log_level="warning" if cfg.log_level == "info" else cfg.log_level,
        access_log=cfg.log_level == "debug", lifespan="off", timeout_graceful_shutdown=30))
    try:
        if not signals:  # a signal during start-up: skip serving, go straight to stopping
            server.run()
    finally:
        if os.path.exists(service_file):
            os.unlink(service_file)
    if not server.started and not signals:
        log.error("the HTTP server did not start (see above); the dataflows are left as they were")
        rt.disconnect()
        return 1
    why = signal.Signals(signals[0]).name if signals else "server exit"
    keep = cfg.on_shutdown == "keep"
    if keep:
        names = [d["name"] for d in rt.list(LIVE_STATES)]
        if cfg.embedded:  # the embedded Ray ends with this process: the checkpoints stay
            rt.shutdown(stop_ray=False, forget=False)
            log.info("%s: %d dataflow(s) of pool %r stopped at their last checkpoint; the next "
                     "service restores them: %s", why, len(names), cfg.pool,
                     ", ".join(names) or "none")
        else:
            log.info("%s: leaving %d dataflow(s) running in pool %r for the next service: %s",
                     why, len(names), cfg.pool, ", ".join(names) or "none")
    else:
        log.info("%s: shutting down", why)
        try:
            core.stop_all(cfg.drain_timeout_s, log.info)
        except CameoError as e:
            log.error("stopping the dataflows failed: %s", e)
        if cfg.embedded or not pool_existed:
            rt.shutdown(stop_ray=False)  # the pool was ours: its executors go too
    rt.disconnect()
    log.info("service stopped")
    return 0
