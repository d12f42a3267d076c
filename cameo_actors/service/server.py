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
from types import FrameType

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import LIVE_STATES
from cameo_actors.service.auth import TokenStore, write_private
from cameo_actors.service.config import ServiceConfig
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.history import History
from cameo_actors.service.limits import TenantLimits

log = logging.getLogger("cameo.service")
#: How often ended dataflows are looked for to keep in the service's history (seconds).
HISTORY_EVERY_S = 5.0


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
                           state_disk_budget_bytes=cfg.state_disk_budget_bytes,
                           max_state_disk_bytes=cfg.max_state_disk_bytes,
                           max_string_chars=cfg.max_string_chars,
                           ended_retention_s=cfg.keep_ended_s,
                           checkpoint_url=cfg.checkpoint_url,
                           ingress_log_dir=cfg.ingress_log_dir,
                           checkpoint_interval_s=cfg.checkpoint_interval_s,
                           replace_lost_after_s=cfg.replace_lost_after_s,
                           delivery=cfg.delivery, admission=cfg.admission,
                           state_backend=cfg.state_backend, store_dir=cfg.store_dir,
                           standby_executors=cfg.standby_executors,
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
    history = History(os.path.join(state_dir, "history"), kept=cfg.history_kept,
                      retention_s=cfg.history_days * 86400.0)
    core = ServiceCore(rt, allowed_modules=rt.config.allowed_modules, history=history)
    keeping = threading.Event()  # set: the service stops

    def keep_ended() -> None:
        """Ended dataflows go into the service's history as they end (the pool forgets
        them after --keep-ended, or when it stops)."""
        while not keeping.wait(HISTORY_EVERY_S):
            try:
                core.keep_ended()
            except Exception:  # the next round tries again
                log.exception("history: keeping the ended dataflows failed")

    threading.Thread(target=keep_ended, name="cameo-history", daemon=True).start()
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
        keeping.set()
        try:  # what they ended as, before the pool forgets them
            core.keep_ended()
        except (CameoError, TimeoutError, OSError) as e:
            log.error("history: keeping the ended dataflows failed: %s", e)
        if cfg.embedded or not pool_existed:
            rt.shutdown(stop_ray=False)  # the pool was ours: its executors go too
    rt.disconnect()
    log.info("service stopped")
    return 0
