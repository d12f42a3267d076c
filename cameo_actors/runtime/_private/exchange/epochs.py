"""Moving key bins between instances of a keyed step, in-band (Megaphone).

A change of a keyed step's routing table travels as control messages, which
are barriers in a mailbox like watermarks (a list payload on a watermark
message; `CONTROL` below names them):

1. ``prepare``: the controller tells every instance of the step, out of band,
   what version v will move (bin -> (old, new instance)); it takes effect only
   at markers.
2. ``reroute`` (to each upstream activation): at that point of its own input
   the upstream sends ``epoch v`` on every channel to the step's instances (old
   and new), its current watermark to new instances, and from then on routes
   by table v. So on every channel, events before the marker go to the old
   owner and events after it to the new one.
3. At an instance of the step (`Epoch`): once its first marker arrived, an
   instance that gives or takes bins holds the watermarks of the channels
   whose marker arrived (a window of a moving bin must not fire on a
   post-switch watermark). The old owner, once every channel's marker is in
   (all pre-switch events of the moved bins processed), takes the bins' state
   out of its operator in bounded chunks, each a message to itself that the
   scheduler runs like any other work, and sends each chunk to the new owner
   (``state``), then a last, empty chunk. The new owner buffers the events of
   bins it takes until every sender's last chunk arrived, then runs them and
   releases the held watermarks. Its watermark is never above the old
   owner's at the switch (it has at most each channel's pre-switch
   watermark), so no moved window is behind it.
4. An instance is done with v once every marker arrived and its own part is
   finished; the controller waits for all of them before version v+1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Control kinds (the first item of a control payload).
REROUTE, EPOCH, STATE, EXTRACT = "reroute", "epoch", "state", "extract"
#: A lessee's partial aggregates for one owner; the end of lending to some lessees
#: (Dirigo, `cameo_actors.operators.lease`).
MERGE, UNLEASE = "merge", "unlease"
#: The sender is idle: a source instance that took in nothing for its idle_timeout_ms,
#: or an activation all of whose inputs are idle. The receiver leaves the channel out of
#: its watermark until data or a watermark comes on it again.
IDLE = "idle"
#: State entries (a key in a window) taken per step of giving bins away: bounds one
#: step's work to a few ms.
CHUNK_KEYS = 4_000

#: A channel into an activation: (input port, upstream activation id).
Channel = tuple[int, str]


def is_control(payload: Any) -> bool:
    """Whether a barrier message carries a control message rather than a watermark."""
    return payload.__class__ is list


@dataclass
class Epoch:
    """What one instance of a keyed step does for one routing version.

    Attributes:
        version: the routing table version this epoch switches to.
        give: bin -> the instance (activation id) that takes it from here.
        take: bins this instance takes.
        senders: instances that give bins to this one (each sends a last chunk).
        marked: channels whose marker arrived.
        held: channel -> the latest watermark held back on it.
        buffered: (port, events) of taken bins that arrived before their state.
        bins: the bins given away whose state is still to take (None: not started).
        received: senders whose last chunk arrived.
    """

    version: int
    give: dict[int, str] = field(default_factory=dict)
    take: frozenset[int] = frozenset()
    senders: frozenset[str] = frozenset()
    marked: set[Channel] = field(default_factory=set)
    held: dict[Channel, float] = field(default_factory=dict)
    buffered: list[tuple[int, list[Any]]] = field(default_factory=list)
    bins: list[int] | None = None
    received: set[str] = field(default_factory=set)
    given: bool = False

    @property
    def involved(self) -> bool:
        return bool(self.give or self.take)

    def holds(self, channel: Channel) -> bool:
        """Whether a watermark on `channel` waits for this epoch to finish."""
        return self.involved and channel in self.marked

    def finished(self, channels: int) -> bool:
        return len(self.marked) >= channels and (not self.give or self.given) \
            and self.received >= self.senders
