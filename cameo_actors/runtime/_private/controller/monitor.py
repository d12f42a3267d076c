"""The monitor: a thread that looks at the pool every `monitor_interval_s`.

- a `finishing` dataflow (sources closed) becomes `finished` once every
  activation saw the end of its inputs (and, with checkpoints, its last results
  are committed by one last checkpoint);
- each dataflow's rates and costs are sampled: admission predicts with them, and
  the overload report is kept current;
- a dataflow over its state budget fails and its state is freed;
- ended dataflows are forgotten after `ended_retention_s`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter

from cameo_actors.runtime._private.controller.admission import Admission
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.executor_api import ExecutorAPI, HostCpu
from cameo_actors.runtime.boundary import FINISHING, LIVE_STATES
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.lifecycle import LifecycleEvent

logger = logging.getLogger(__name__)
#: How often records changed without a save of their own are saved, at most (seconds).
RECORDS_SAVED_EVERY_S = 10.0


class Monitor:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry,
                 admission: Admission, checkpoints: CheckpointCoordinator) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        self.admission, self.checkpoints = admission, checkpoints
        self.saved_at = -math.inf  # when `save` last wrote the registry (monotonic)

    def run(self, stopped: threading.Event) -> None:
        while not stopped.wait(self.config.monitor_interval_s):
            self.once()

    def once(self) -> None:
        for check in (self.check_finishing, self.check_usage, self.expire, self.save):
            try:
                check()
            except Exception:  # a bug here must not stop the other checks
                logger.exception("controller: %s failed", check.__name__)

    def check_finishing(self) -> None:
        for info in self.registry.named((FINISHING,)):
            live = [i for i in info["executors"] if i not in self.pool.dead]
            gateway = self.pool.gateway
            answers = gateway.gather_each(gateway.send_all(live, ExecutorAPI.ended, info["name"]),
                                          timeout_s=10.0)
            if answers and all(answers):
                # The last results become readable (exactly-once) and need no replay.
                if info["checkpoints"]["interval_s"] > 0 and \
                        not self.checkpoints.now([info["name"]]).get(info["name"]):
                    continue
                with self.pool.lock:
                    if info["state"] == FINISHING:  # not recovering, nor ended, meanwhile
                        self.registry.enter(info, LifecycleEvent.DRAINED,
                                            "every source closed and drained")

    def check_usage(self) -> None:
        """State budgets, and the samples of rates and costs behind the overload report."""
        usage: dict[str, Counter[str]] = {}
        cpu: dict[int, HostCpu] = {}
        live = self.pool.live()
        gateway = self.pool.gateway
        parts = gateway.gather_each(gateway.send_all(live, ExecutorAPI.usage), timeout_s=10.0)
        for index, part in zip(live, parts, strict=True):
            if part is None:
                continue
            dataflows = part.get("dataflows")
            if isinstance(dataflows, dict) and "cpu" in part:
                cpu[index] = part["cpu"]
            else:  # an executor of an older version, during an upgrade: counters only
                dataflows = part
            for name, counts in dataflows.items():
                usage.setdefault(name, Counter()).update(counts)
        self.admission.observe(time.monotonic(), usage, cpu)
        for name, u in usage.items():
            info = self.registry.dataflows.get(name)
            if info is None or info["released"]:
                continue
            used, disk = int(u["bytes"]), int(u.get("disk_bytes", 0))
            self.registry.measured(info, used, disk)
            limits = info["spec"].get("limits", {})
            budget = limits.get("state_bytes") or self.config.state_budget_bytes
            disk_budget = limits.get("state_disk_bytes") or self.config.state_disk_budget_bytes
            if info["state"] not in LIVE_STATES:
                continue
            if used > budget:
                self.registry.fail(name, f"over its state budget: about {used} bytes of "
                                         f"operator state and unread results, budget {budget} "
                                         "bytes. Fix: read and commit results sooner, use "
                                         "smaller or fewer windows, or set limits.state_bytes "
                                         "in the spec (up to the pool's max_state_bytes)")
            elif disk > disk_budget:
                self.registry.fail(name, f"over its state budget on disk: {disk} bytes of "
                                         f"operator state in its stores' files, budget "
                                         f"{disk_budget} bytes. Fix: use smaller or fewer "
                                         "windows, or set limits.state_disk_bytes in the spec "
                                         "(up to the pool's max_state_disk_bytes)")

    def expire(self) -> None:
        self.registry.expire(self.config.ended_kept, self.config.ended_retention_s)

    def save(self) -> None:
        """The records changed without a save of their own (checkpoints'), saved at most
        every `RECORDS_SAVED_EVERY_S`: a restarted service shows them, and a pool of many
        dataflows checkpointing each second does not write its registry each second."""
        now = time.monotonic()
        if self.registry.unsaved and now - self.saved_at >= RECORDS_SAVED_EVERY_S:
            self.saved_at = now
            self.registry.save()
