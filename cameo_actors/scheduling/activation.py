"""One hosted activation: its mailbox, its profile, and where it stands with the run
queue (`ActivationState`, the one state machine of the scheduler)."""

from __future__ import annotations

from enum import Enum

from .context import SortKey
from .profile import ActivationProfile
from .queues import Mailbox


class ActivationState(Enum):
    """Where an activation stands with the run queue; one state, not a set of flags.

    Being held (no credits downstream) and running can coexist: a hold that
    arrives while the activation runs takes effect at the next message
    boundary. Held and queued cannot: a held activation leaves the run queue.
    These are all the combinations there are:

    ============  =========================  =========================================
    state         in the run queue / runs    next, on
    ============  =========================  =========================================
    IDLE          no / no (mailbox empty)    enqueue: QUEUED; hold: HELD
    QUEUED        yes, under `qkey` / no     enqueue of a more urgent message: QUEUED
                                             (re-keyed); run_once: RUNNING; hold: HELD
    RUNNING       no / yes                   slice end: QUEUED if mail is left, else
                                             IDLE; hold: RUNNING_HELD
    RUNNING_HELD  no / yes, ends at the      release: RUNNING; slice end: HELD
                  next message boundary
    HELD          no / no (takes mail)       release: QUEUED if it has mail, else IDLE
    REMOVED       no / its slice ends        (final; the scheduler forgot it)
    ============  =========================  =========================================

    `remove_activation` moves any state to REMOVED; enqueue to a RUNNING,
    RUNNING_HELD or HELD activation only fills its mailbox.
    """

    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    RUNNING_HELD = "running_held"
    HELD = "held"
    REMOVED = "removed"


# Module-level aliases, imported where the hot paths (enqueue, the run_once loop) test
# an activation's state per message: an enum member lookup through the class costs
# ~50 ns on 3.11, a module global's does not.
_IDLE = ActivationState.IDLE
_QUEUED = ActivationState.QUEUED
_RUNNING = ActivationState.RUNNING
_RUNNING_HELD = ActivationState.RUNNING_HELD
_HELD = ActivationState.HELD
_REMOVED = ActivationState.REMOVED


class Activation:
    """A hosted activation: its id and tenant (read on every slice), its mailbox and
    profile, its state, and its key in the run queue while QUEUED."""

    __slots__ = ("id", "tenant", "mailbox", "profile", "state", "qkey")

    def __init__(self, profile: ActivationProfile) -> None:
        self.id = profile.activation_id
        self.tenant = profile.tenant
        self.mailbox = Mailbox()
        self.profile = profile
        self.state = ActivationState.IDLE
        self.qkey: SortKey = None  # its key in the run queue while QUEUED
