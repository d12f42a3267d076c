"""What a Kafka reader and writer share: options, waits, the client's settings, the thread.

The connectors themselves: `kafka` (the module that starts them) has what they do.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import ConnectorSpec
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.core import ExecutorCore

logger = logging.getLogger(__name__)

KAFKA = "kafka"
#: A connector's waits (`Waits`) are each at most this share of its dataflow's latency
#: target, and within these bounds (ms).
WAIT_SHARE = 1 / 25
WAIT_MIN_MS, WAIT_MAX_MS = 1.0, 50.0
#: A broker that does not answer: tried again after this long, doubled up to the cap.
RETRY_S, RETRY_CAP_S = 0.5, 10.0
#: How long a call to the broker or to the worker thread may take; how long the first
#: call to a broker waits for it (then the connector shows it is waiting, and tries again).
CALL_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
WAITING = "waiting for the broker"


def kafka_options(step: Any) -> dict[str, str] | None:
    """A source's or sink's Kafka connector options; None if it has no Kafka connector."""
    connector: ConnectorSpec | None = getattr(step, "connector", None)
    return dict(connector.options) if connector is not None and connector.format == KAFKA \
        else None


@dataclass(frozen=True)
class Waits:
    """How long a connector lets a record wait, by its dataflow's latency target: a
    record waits in each (the broker's fetch, the reader's batch, the writer's look at its
    result log), so a 50 ms target cannot afford the 10 ms each that a 1 s one can, and a
    1 s one need not pay for a connector that asks the broker 500 times a second.

    Attributes:
        fetch_ms: how long the broker may hold a fetch that has no records yet
            (librdkafka's 500 ms default held each record that long on Tansu); a source's
            `kafka.fetch.wait.max.ms` overrides it.
        read_s: how long one read waits for a full batch (a read returns when its batch is
            full or this passed); how soon a stop is seen.
        write_idle_s: how often a writer with nothing to write looks at its log again.

    >>> Waits.for_target(50.0), Waits.for_target(1000.0).fetch_ms
    (Waits(fetch_ms=2, read_s=0.002, write_idle_s=0.002), 40)
    """

    fetch_ms: int
    read_s: float
    write_idle_s: float

    @classmethod
    def for_target(cls, latency_target_ms: float) -> Waits:
        ms = min(max(latency_target_ms * WAIT_SHARE, WAIT_MIN_MS), WAIT_MAX_MS)
        return cls(fetch_ms=round(ms), read_s=round(ms) / 1000.0, write_idle_s=round(ms) / 1000.0)


def waits_of(core: ExecutorCore, act: Activation) -> Waits:
    """The waits of `act`'s connector, by its dataflow's target when it opens (a target
    changed later counts from its next open)."""
    hosted = core.hosting.dataflows.get(act.dataflow)
    return Waits.for_target(hosted.spec.latency_target_ms if hosted else 1000.0)


def client_config(options: dict[str, str], on_error: Callable[[Any], None]) -> dict[str, Any]:
    """librdkafka's settings: the `kafka.` options, less the prefix, a value `env:NAME`
    read from the executor's environment (so that a password is in no spec, checkpoint or
    API answer). Its errors go to `on_error` (the connector's state shows them), not to
    the log: a broker away would write a line per connection attempt.

    >>> os.environ["CAMEO_DOC_SECRET"] = "s3cret"
    >>> client_config({"kafka.sasl.password": "env:CAMEO_DOC_SECRET", "topic": "t"}, print)
    {'log_level': 2, 'sasl.password': 's3cret', 'error_cb': <built-in function print>}
    """
    conf: dict[str, Any] = {"log_level": 2}
    for name, value in options.items():
        if not name.startswith("kafka."):
            continue
        if value.startswith("env:"):
            var = value[len("env:"):]
            if var not in os.environ:
                raise LookupError(f"option {name} reads the environment variable {var!r}, "
                                  "which this executor's process does not have. Fix: set it "
                                  "where the executors start (the service's environment)")
            value = os.environ[var]
        conf[name[len("kafka."):]] = value
    conf["error_cb"] = on_error
    return conf


class Connector(threading.Thread):
    """A Kafka reader or writer of instance `act`: its state, and the broker's last error,
    for stats. `call` runs a function on the worker thread (`Worker.call`)."""

    def __init__(self, name: str, core: ExecutorCore, call: Callable[..., Any],
                 act: Activation) -> None:
        super().__init__(name=name, daemon=True)
        self.core, self.call, self.act, self.aid = core, call, act, act.id
        self.waits = waits_of(core, act)
        self.state, self.error = "starting", ""
        self.failures = 0  # reads or writes that failed and were tried again
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def _alive(self) -> bool:
        """Not stopped, and its instance still the one hosted (not cancelled or restored)."""
        return not self.stopped.is_set() and self.core.hosting.activations.get(self.aid) is self.act

    def on_error(self, err: Any) -> None:
        """librdkafka's error callback (its own thread): the broker away is shown."""
        self.error = str(err)
        if err.code() in _BROKER_AWAY:
            self.state = WAITING

    def report(self) -> dict[str, Any]:
        """What stats show of it (read from another thread: a snapshot)."""
        return {"state": self.state, "error": self.error, "failures": self.failures}

    def failed(self, e: Exception, backoff: float) -> None:
        self.state, self.error = WAITING, f"{type(e).__name__}: {e}"
        self.failures += 1
        logger.warning("kafka %s: %s; trying again in %.1f s", self.aid, self.error, backoff)


#: librdkafka's error codes for a broker it cannot reach (filled at first use)
_BROKER_AWAY: set[int] = set()


def load_kafka() -> Any:
    """confluent_kafka, imported where a connector runs (not where none does)."""
    import confluent_kafka

    if not _BROKER_AWAY:
        err = confluent_kafka.KafkaError
        _BROKER_AWAY.update({err._ALL_BROKERS_DOWN, err._TRANSPORT, err._RESOLVE})
    return confluent_kafka
