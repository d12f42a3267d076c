"""The executor's side of changes of the physical plan while data flows.

The controller changes a running dataflow's plan in steps, each a call to every
executor; this part carries out an executor's share of each:

- new instances of a keyed step (`add_instances`), and instances retired once
  they gave away every bin (`retire`);
- moving bins (Megaphone, `migration.py`): what a routing version moves
  (`prepare`), the switch of each upstream at its own point in its input
  (`reroute`) and progress (`epochs`);
- lessees of a hot step (Dirigo, `operators/lease.py`): hosted and lent to
  (`add_lessees`), lent to no more (`unlease`), ended (`lessees_ended`), gone
  (`drop_lessees`).

Every change that must happen at a point of a stream is a control message in a
mailbox (a barrier there, like a watermark), put on the executor's
`MessagePath`; hosting and unhosting activations is the core's (`Hosts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.exchange.epochs import REROUTE, UNLEASE
from cameo_actors.runtime._private.executor.parts import MessagePath
from cameo_actors.runtime._private.executor_api import EpochProgress

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.hosting import Hosting
    from cameo_actors.runtime._private.placement import Placement
    from cameo_actors.scheduling import Scheduler


class Hosts(MessagePath, Protocol):
    """The message path, and hosting activations of a dataflow already running."""

    def host(self, spec: DataflowSpec, placement: Placement, new: list[str], generation: int,
             deployment: str) -> set[str] | None:
        """Host the activations of `new` that `placement` puts here; None if this executor
        has no part of the dataflow at all."""

    def unhost(self, dataflow: str, ids: list[str]) -> list[str]:
        """Activations gone from the dataflow: those hosted here stop (returned)."""


class PlanChanges:
    """An executor's share of the controller's plan changes.

    Args:
        hosting: the activations hosted here (read, and changed through `hosts`).
        sched: the scheduler (whether an activation has messages waiting).
        now_ms: the time now (stamps the control messages).
        hosts: the core: hosting, unhosting, and the message path.
    """

    def __init__(self, hosting: Hosting, sched: Scheduler, now_ms: Callable[[], float],
                 hosts: Hosts) -> None:
        self.hosting = hosting
        self.sched = sched
        self.now_ms = now_ms
        self.hosts = hosts

    def _ids(self, dataflow: str) -> list[str]:
        # A call may come for a dataflow cancelled here meanwhile.
        return self.hosting.ids(dataflow) if dataflow in self.hosting.dataflows else []

    # -- instances of a keyed step ---------------------------------------------------------
    def add_instances(self, spec: DataflowSpec, placement: Placement, new: list[str],
                      generation: int = 0, deployment: str = "") -> list[str]:
        """New instances of a keyed step: host those `placement` puts here, and make every
        hosted activation of the dataflow expect them (as an input channel, a target)."""
        made = self.hosts.host(spec, placement, new, generation, deployment)
        if made is None:
            return []
        by_id = {str(a): a for a in placement.instances}
        for aid in self.hosting.ids(spec.name):
            if aid in made:
                continue
            act = self.hosting.activations[aid]
            for n in new:
                step = by_id[n].step
                for port, up in enumerate(act.step.inputs):
                    if up == step:
                        act.add_channel(port, n)
                act.add_target(step, n)
        return sorted(made)

    def retire(self, dataflow: str, ids: list[str]) -> list[str]:
        """Instances that gave away every bin: the end of their stream on every channel
        out, then they are gone (here, and from routing on every executor)."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return []
        now = self.now_ms()
        for aid in ids:
            act = self.hosting.activations.get(aid)
            if act is not None and aid in hosted.ids:
                self.hosts.send_barriers(hosted.spec, aid, act.end_barriers(), now)
        here = self.hosts.unhost(dataflow, ids)
        gone = set(ids)
        for aid in hosted.ids:
            self.hosting.activations[aid].drop_targets(gone)
        return here

    # -- moving bins (migration.py) -------------------------------------------------------
    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        """Tell the instances of `step` hosted here what routing version `version` moves."""
        for aid in self._ids(dataflow):
            act = self.hosting.activations[aid]
            if act.step.id == step:
                act.prepare(version, moves)

    def reroute(self, dataflow: str, step: str, version: int, owners: list[int],
                instances: list[int]) -> int:
        """Switch the upstreams of `step` hosted here to table `version`, each at its own
        point in its input (a control message in its mailbox). Returns how many."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        inputs = set(hosted.spec.step(step).inputs)
        now = self.now_ms()
        n = 0
        for aid in hosted.ids:
            act = self.hosting.activations[aid]
            if act.step.id in inputs:
                self.hosts.control(hosted.spec, aid, [REROUTE, step, version, list(owners),
                                                      list(instances)], now)
                n += 1
        return n

    def epochs(self, dataflow: str, step: str) -> dict[str, EpochProgress]:
        """Per instance of `step` here: the last routing version done, and bins and bytes
        it gave away."""
        out: dict[str, EpochProgress] = {}
        for aid in self._ids(dataflow):
            act = self.hosting.activations[aid]
            if act.step.id == step:
                out[aid] = {"done": act.done_version, "bins_given": act.bins_given,
                            "bytes_sent": act.bytes_sent}
        return out

    # -- lessees (Dirigo, operators/lease.py) ------------------------------------------------
    def add_lessees(self, spec: DataflowSpec, placement: Placement, step: str, new: list[str],
                    generation: int = 0, deployment: str = "") -> list[str]:
        """Host the new lessees of `step` that `placement` puts here; the step's instances
        here take their partials, its upstreams here lend to them from their next event."""
        made = self.hosts.host(spec, placement, new, generation, deployment)
        if made is None:
            return []
        now = self.now_ms()
        for aid in self.hosting.ids(spec.name):
            if aid not in made:
                self.hosts.send_barriers(
                    spec, aid, self.hosting.activations[aid].add_lessees(step, new), now)
        return sorted(made)

    def unlease(self, dataflow: str, step: str, ids: list[str]) -> int:
        """Stop lending to lessees `ids` of `step`: each upstream here, at its point in its
        input, ends its stream to them; a lessee then sends its last partials and ends."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return 0
        now = self.now_ms()
        n = 0
        for aid in hosted.ids:
            if any(r.step == step and r.lessees for r in self.hosting.activations[aid].routes):
                self.hosts.control(hosted.spec, aid, [UNLEASE, step, list(ids)], now)
                n += 1
        return n

    def lessees_ended(self, dataflow: str, ids: list[str]) -> bool:
        """Whether the lessees `ids` hosted here saw the end of every input and ran all,
        and the step's instances here got the end of their streams (their last partials
        are in: before it, a channel gone would let an owner's windows fire early)."""
        acts = self.hosting.activations
        if not all(acts[a].saw_end() and not self.sched.pending(a) for a in ids if a in acts):
            return False
        for aid in self._ids(dataflow):
            chans = acts[aid].channels[0]
            if any(chans.get(a, END_OF_STREAM) < END_OF_STREAM for a in ids):
                return False
        return True

    def drop_lessees(self, dataflow: str, ids: list[str]) -> list[str]:
        """Lessees that ended: gone from here and from every channel map."""
        hosted = self.hosting.dataflows.get(dataflow)
        if hosted is None:
            return []
        here = self.hosts.unhost(dataflow, ids)
        gone = set(ids)
        for aid in hosted.ids:
            self.hosting.activations[aid].drop_lessees(gone)
        return here
