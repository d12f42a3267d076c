"""What the console shows beyond a dataflow's status, each an API answer a script can read
too: a dataflow's graph (its instances, executors, backpressure and share of the critical
path), its checkpoints, its time line, and the pool's hotspots.

Every answer keeps a tenant to its own dataflows: the hotspots list only the dataflows
the caller may see, and the executors' rows only for the admin.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

from cameo_actors.errors import CameoError
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    DataflowFigures,
    DataflowInfo,
    DataflowSummary,
    PoolSnapshot,
)
from cameo_actors.runtime.exceptions import DataflowEnded, DataflowNotFound
from cameo_actors.service.auth import Principal
from cameo_actors.service.protocol import json_safe
from cameo_actors.service.status import Status
from cameo_actors.service.tenancy import log

#: Rows per table of the hotspots.
HOTSPOTS_SHOWN = 10
#: The pool's snapshot (one round of calls to every executor) is shared by the callers
#: within this many seconds: consoles that poll do not multiply the pool's work.
SNAPSHOT_TTL_S = 1.0


class Overview(Status):
    """The core's part that answers the console's views (`core.ServiceCore`): it adds to
    what a caller may see (`Status`)."""

    def list(self, principal: Principal, states: builtins.list[str] | None = None,
             detail: bool = False) -> builtins.list[DataflowSummary]:
        """The dataflows this caller may see; with `detail`, each live one's figures."""
        listed = super().list(principal, states)
        if detail:
            for d in listed:
                d["figures"] = self.figures(d["name"], d["submitted_at"]) \
                    if d["state"] in LIVE_STATES else None
        return listed

    def graph(self, principal: Principal, name: str, *, last_s: float = 60.0
              ) -> dict[str, Any]:
        """The dataflow's steps with their instances and executors, the activations held
        by flow control (backpressure), each step's share of the critical path over the
        last `last_s` seconds (None once it ended, or without trace snapshots) and its
        instances' busy share as the scaling controller measured it (None: not yet)."""
        self._entry(principal, name)
        info = self._describe(name)
        if info is None:
            return dict(self._kept(name, "graph"))
        live = info["state"] in LIVE_STATES
        shares: dict[str, float] = {}
        held: list[str] = []
        measured: dict[str, Any] = {}
        if live:
            try:
                shares = dict(self.rt.explain(name, last_s=last_s).get("operators") or {})
                held = list(self.rt.stats(name).get("held", []))
            except (DataflowEnded, DataflowNotFound):
                live = False
            scaling = self._quietly(lambda: self.rt.scaling(name), {})
            measured = ((scaling.get("dataflows") or {}).get(name) or {}).get("steps") or {}
        # Where each instance runs: a moved instance has a new number, a hot key's lessee
        # is an instance too (the record's hosts say which there are).
        placed: dict[str, list[tuple[int, str, int]]] = {}
        for aid, executor in info["hosts"].items():
            _, step, number = aid.rsplit("/", 2)
            placed.setdefault(step, []).append((int(number), aid, executor))
        steps = []
        for s in info["spec"]["steps"]:
            instances = [{"id": aid, "executor": executor}
                         for _, aid, executor in sorted(placed.get(s["id"], []))]
            prefix = f"{name}/{s['id']}/"
            steps.append({"id": s["id"], "op": s["op"], "inputs": list(s.get("inputs") or []),
                          "parallelism": int(s.get("parallelism", 1)), "instances": instances,
                          "critical_share": shares.get(s["id"], 0.0) if live and shares
                          else None,
                          "busy_share": (measured.get(s["id"]) or {}).get("busy"),
                          "held": sum(1 for a in held if a.startswith(prefix))})
        return {"name": name, "state": info["state"], "window_s": last_s, "steps": steps}

    def checkpoints(self, principal: Principal, name: str) -> dict[str, Any]:
        """The dataflow's checkpoints: counts, the last ones (newest first) with their
        durations, sizes and parts per executor, and its last restore's phases."""
        self._entry(principal, name)
        info = self._describe(name)
        if info is None:
            return dict(self._kept(name, "checkpoints"))
        counts: dict[str, Any] = dict(info["checkpoints"])
        history = list(reversed(counts.pop("history", [])))
        return {"name": name, **counts, "history": history}

    def timeline(self, principal: Principal, name: str) -> dict[str, Any]:
        """The dataflow's history on one time line, oldest first: its states (deploys,
        recoveries and restores, its end), its live changes, its reconfigurations, the
        scaling controller's decisions with their reasons, and its failed checkpoints."""
        self._entry(principal, name)
        info = self._describe(name)
        if info is None:
            return dict(self._kept(name, "timeline"))
        events: list[dict[str, Any]] = []

        def add(at: float | None, kind: str, what: str) -> None:
            if at is not None:
                events.append({"at": at, "kind": kind, "what": what})

        for h in info["history"]:
            add(h["at"], "state", h["state"] + (f": {h['reason']}" if h.get("reason") else ""))
        for c in info.get("changes", []):
            add(c["at"], "change", c["what"])
        for r in info["checkpoints"].get("history", []):
            if not r["ok"]:
                add(r["at"], "checkpoint", f"checkpoint {r['id']} failed: {r['reason']}")
        for m in self._quietly(lambda: self.rt.migrations(name), []):
            what = (f"{m['kind']} of {m['step']} from {m['from_parallelism']} to "
                    f"{m['to_parallelism']} instances ({m['strategy']})")
            add(m["started_at"], "migration", f"{what} started")
            if m["ended_at"] is not None:
                add(m["ended_at"], "migration",
                    f"{what} {m['state']} after {m['duration_s']:.1f} s: {m['bins_moved']} of "
                    f"{m['bins_total']} bins, {m['bytes_moved']} bytes"
                    + (f" ({m['error']})" if m["error"] else ""))
        scaling = self._quietly(lambda: self.rt.scaling(name), {})
        for d in scaling.get("decisions") or []:
            if d.get("dataflow") == name:
                add(d.get("at"), "scaling",
                    f"{d.get('kind', 'parallelism')} of {d.get('step')} "
                    f"{d.get('from_parallelism')} -> {d.get('to_parallelism')}: "
                    f"{d.get('reason')}")
        events.sort(key=lambda e: e["at"])
        return {"name": name, "events": events}

    def hotspots(self, principal: Principal, *, last_s: float = 60.0) -> dict[str, Any]:
        """Across the pool, ranked: the steps with the largest share of the critical path,
        the dataflows furthest from their targets, the largest backlogs, and (for the
        admin) the busiest executors; with the pool's critical path over the last `last_s`
        seconds in words (other tenants' dataflows unnamed to a tenant)."""
        snap = self.snapshot()
        explained = self._quietly(lambda: self.explain(principal, None, last_s=last_s), {})
        mine = [d for d in snap.get("dataflows", []) if principal.can_access(d["tenant"])]
        tenant_of = {d["name"]: d["tenant"] for d in mine}
        by_operator = (snap.get("critical_path") or {}).get("by_operator") or {}
        steps: list[dict[str, Any]] = []
        for key, share in by_operator.items():
            dataflow, _, step = str(key).rpartition("/")
            if dataflow in tenant_of and share > 0:
                steps.append({"dataflow": dataflow, "tenant": tenant_of[dataflow],
                              "step": step, "critical_share": share})
        misses: list[dict[str, Any]] = [{"dataflow": d["name"], "tenant": d["tenant"],
                   "within_target": d["within_target_count"] / d["results"]
                   if d["results"] else None, "p99_ms": d["p99_ms"],
                   "latency_target_ms": d["target_ms"]} for d in mine]
        backlogs: list[dict[str, Any]] = [{"dataflow": d["name"], "tenant": d["tenant"], "backlog": d["backlog"]}
                    for d in mine]
        executors: list[dict[str, Any]] = [{"executor": e.get("executor"), "busy_share": self._busy_share(e),
                      "backlog": e.get("backlog", 0), "held": e.get("held", 0),
                      "activations": e.get("activations", 0)}
                     for e in snap.get("executors", [])] if principal.admin else []
        return {
            "window_s": last_s, "words": list(explained.get("words") or []),
            "steps": sorted(steps, key=lambda r: -r["critical_share"])[:HOTSPOTS_SHOWN],
            "misses": sorted(misses, key=lambda r: (r["within_target"] is None,
                                                    r["within_target"] or 0.0)
                             )[:HOTSPOTS_SHOWN],
            "backlogs": sorted(backlogs, key=lambda r: -r["backlog"])[:HOTSPOTS_SHOWN],
            "executors": sorted(executors, key=lambda r: -(r["busy_share"] or 0.0)
                                )[:HOTSPOTS_SHOWN]}

    def figures(self, name: str, submitted_at: float | None) -> DataflowFigures | None:
        """A live dataflow's figures for the list (None if the pool's snapshot lacks it)."""
        m = self._by_name(self.snapshot()).get(name)
        if m is None:
            return None
        rates = self._throughput(name, self.clock.now_ms(), submitted_at, m)
        return {"weight": m["weight"], "p99_ms": m["p99_ms"],
                "within_target": m["within_target_count"] / m["results"] if m["results"]
                else None, "events_in_per_s": rates["events_in_per_s"],
                "backlog": m["backlog"], "results": m["results"]}

    # -- helpers ---------------------------------------------------------------------------
    def snapshot(self) -> PoolSnapshot:
        """The pool's snapshot, shared by the callers of the last `SNAPSHOT_TTL_S`."""
        with self._snapshot_lock:
            at, snap = self._snapshot
            now = time.monotonic()
            if snap is None or now - at > SNAPSHOT_TTL_S:
                snap = self.rt.stats_all()
                self._note_busy(snap, now)
                self._snapshot = (now, snap)
            return snap

    def _by_name(self, snap: PoolSnapshot) -> dict[str, Any]:
        """The snapshot's dataflows by name, made once per snapshot: the list's detail
        asks for each dataflow in turn."""
        with self._snapshot_lock:
            if self._indexed[0] is not snap:
                self._indexed = (snap, {d["name"]: d for d in snap.get("dataflows", [])})
            return self._indexed[1]

    def _note_busy(self, snap: PoolSnapshot, now: float) -> None:
        """Each executor's busy share since the snapshot before (its busy time is a
        running count)."""
        for e in snap.get("executors", []):
            key, busy = e.get("executor"), float(e.get("busy_ms", 0.0))
            before = self._busy.get(key)
            share = None if before is None or now <= before[0] \
                else max(0.0, busy - before[1]) / ((now - before[0]) * 1000.0)
            self._busy[key] = (now, busy, share)

    def _busy_share(self, e: Any) -> float | None:
        seen = self._busy.get(e.get("executor"))
        return None if seen is None else seen[2]

    def _describe(self, name: str) -> DataflowInfo | None:
        """Its record in the pool (None: the pool forgot it; its history may have it)."""
        try:
            return self.rt.describe(name, refresh=True)
        except DataflowNotFound:
            return None

    def keep_ended(self) -> int:
        """Keep what the API answers now for every ended dataflow of the pool that the
        history lacks: it outlives the pool. Returns how many were kept."""
        admin = Principal(tenant=None, admin=True, token_id="history")
        kept = 0
        for d in self.rt.list():
            name = d["name"]
            if d["state"] in LIVE_STATES or self.history.has(name, d["ended_at"]):
                continue
            try:
                record = {"summary": dict(d), "status": self.status(admin, name),
                          "spec": self.spec(admin, name), "graph": self.graph(admin, name),
                          "checkpoints": self.checkpoints(admin, name),
                          "timeline": self.timeline(admin, name),
                          "exceptions": self.exceptions(admin, name)}
                self.history.keep(json_safe(record))
            except (CameoError, TimeoutError, OSError) as e:  # the next round tries again
                log.warning("history: %s not kept yet: %s", name, e)
                continue
            kept += 1
        return kept

    @staticmethod
    def _quietly(call: Any, default: Any) -> Any:
        """What `call` answers, or `default` when the runtime cannot say now (the rest of
        the answer still comes)."""
        try:
            return call()
        except (CameoError, KeyError, TimeoutError, NotImplementedError):
            return default
