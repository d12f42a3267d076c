"""When a wait is over: every event pushed so far processed, and every result it made
readable (`Runtime.wait_idle`).

The client asks the controller what it knows (each dataflow's state and migration under
way, the executors restarting or gone) and each executor hosting the dataflows what it
still has to do for them (`ExecutorCore.unsettled`); this module turns the answers into
the reasons to go on waiting, or into the dataflows whose results only wait for a
checkpoint (exactly-once delivery), which the client then asks for.

A dataflow has nothing in flight between two executors once the receiver applied every
batch the sender sent it with the dataflow's messages: the sender reports the last such
batch per link, the receiver how many batches of each link it applied (links are numbered
from 0 per incarnation, and both ends count again from 0 when one restarts).
"""

from __future__ import annotations

from cameo_actors.runtime._private.controller_api import PoolSettling
from cameo_actors.runtime._private.executor_api import Unsettled
from cameo_actors.runtime.boundary import CANCELLED, FAILED, RECOVERING
from cameo_actors.runtime.exceptions import DataflowEnded


def pool_reasons(pool: PoolSettling, named: bool) -> tuple[list[str], list[int]]:
    """(reasons from the controller's view `pool` (`ControllerAPI.settling`), the executors
    to ask). `named`: the caller named the dataflows, so one that ended is an error.

    Raises:
        DataflowEnded: a named dataflow was cancelled or failed, or its parts are freed.
    """
    waiting: list[str] = []
    hosts: set[int] = set()
    for name, d in pool["dataflows"].items():
        if named and (d["released"] or d["state"] in (CANCELLED, FAILED)):
            raise DataflowEnded(name, d["state"], d["cause"])
        if d["state"] == RECOVERING:
            waiting.append(f"{name} is recovering ({d['cause']})")
        if d["migration"] is not None:
            waiting.append(f"{name}: migration {d['migration']} is under way")
        hosts.update(d["executors"])
    waiting += [f"executor {i} is restarting" for i in sorted(hosts & set(pool["restarting"]))]
    return waiting, sorted(hosts - set(pool["dead"]))


def executor_reasons(names: list[str], reports: dict[int, Unsettled | None]
                     ) -> tuple[list[str], list[str]]:
    """(reasons from the executors' reports, the dataflows settled but for a checkpoint
    that makes their results readable). An executor that did not answer (None) is a
    reason; the links to it are not looked at."""
    answered = {i: r for i, r in reports.items() if r is not None}
    waiting = [f"executor {i} did not answer" for i, r in reports.items() if r is None]
    to_checkpoint: list[str] = []
    for name in names:
        before = len(waiting)
        rows = 0
        for i, report in answered.items():
            work = report["dataflows"].get(name)
            if work is None:
                continue
            busy = [f"{n} {what}" for n, what in ((work["queued"], "messages queued"),
                                                  (work["parked"], "ingest calls parked"),
                                                  (work["moving"], "instances mid-epoch")) if n]
            if busy:
                held = f" (held: {', '.join(work['held'])})" if work["held"] else ""
                waiting.append(f"{name} on executor {i}: {', '.join(busy)}{held}")
            for peer, seq in work["sent"].items():
                receiver = answered.get(int(peer))
                if receiver is not None and receiver["applied"].get(i, 0) <= seq:
                    waiting.append(f"{name}: a batch from executor {i} to {peer} in flight")
            rows += work["awaiting_checkpoint"]
        if rows and len(waiting) == before:
            to_checkpoint.append(name)
    return waiting, to_checkpoint
