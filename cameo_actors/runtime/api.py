"""The Python API of the runtime: start or join a pool, deploy dataflows, push
events, read results and latency.

>>> from cameo_actors import Dataflow, Runtime
>>> rt = Runtime.start()                                  # doctest: +SKIP
>>> rt.deploy(Dataflow("errors", latency_target_ms=50)
...           .source("logs", schema={"ts": "int", "level": "str"}, event_time="ts")
...           .filter("level == 'ERROR'").sink("alerts"))  # doctest: +SKIP
>>> rt.push("errors", "logs", [{"ts": 1, "level": "ERROR"}])  # doctest: +SKIP
>>> rt.close("errors"); rt.wait_idle()                    # doctest: +SKIP
>>> rt.results("errors")                                  # doctest: +SKIP
[{'ts': 1, 'level': 'ERROR'}]

A `Runtime` is a `RuntimeAPI` (`interface.py`): its control operations go to the pool's
controller (those it adds nothing to as they are: `_forward`), its data operations to
the executors hosting each dataflow, through a push session (`_private/client/push.py`)
and the outputs it reads (`_private/client/outputs.py`).

The embedded default starts a private local Ray (`address="local"`), so it never
attaches by accident to a cluster someone else started; pass `address=` to join one.
"""

from __future__ import annotations

import atexit
import builtins
import itertools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import ray

from cameo_actors.operators.base import END_OF_STREAM, Event
from cameo_actors.operators.column_schema import conform
from cameo_actors.runtime._private import cluster
from cameo_actors.runtime._private.client import settle
from cameo_actors.runtime._private.client.controller import RemoteController
from cameo_actors.runtime._private.client.dataflows import Dataflows
from cameo_actors.runtime._private.client.outputs import Outputs
from cameo_actors.runtime._private.client.pool import open_pool, unshared_storage
from cameo_actors.runtime._private.client.push import PushSession
from cameo_actors.runtime._private.cluster import controller_name
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.exchange.ingest import pack_columns, pack_ingest
from cameo_actors.runtime._private.exchange.wire import pack_events
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor, Reply, answered, gather_each
from cameo_actors.runtime._private.stats import dataflow_metrics
from cameo_actors.runtime.boundary import (
    FINISHED,
    LIVE_STATES,
    DataflowInfo,
    DataflowMetrics,
    DataflowPart,
    PoolSnapshot,
    Prediction,
    Pressure,
    Rejected,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import PoolNotFound, StorageNotShared
from cameo_actors.runtime.interface import (
    DEFAULT_BATCH,
    ControlAPI,
    Deployable,
    RuntimeAPI,
    spec_of,
)

logger = logging.getLogger(__name__)


def start_local_ray(run_dir: str | None = None, num_cpus: int | None = None, *,
                    log_to_driver: bool = True) -> None:
    """Start a private local Ray on loopback for this process, before any pool (tests and
    benchmarks start one per session; `Runtime.start` then finds it running)."""
    cluster.init_local(run_dir, num_cpus, log_to_driver=log_to_driver)


#: The control operations after which a handle asks for the dataflow's record again (its
#: target, or where its instances run, changed); each answers with the dataflow's name.
_CHANGING = {op.__name__ for op in (ControlAPI.cancel, ControlAPI.update, ControlAPI.scale,
                                    ControlAPI.migrate, ControlAPI.lease,
                                    ControlAPI.wait_migration)}


class RayIngest:
    """A push session's ingest calls, as Ray calls to the executors (`push.IngestCalls`)."""

    def __init__(self, dataflows: Dataflows) -> None:
        self.dataflows = dataflows

    def send(self, host: int, client: str, seq: int, target: str, blob: bytes) -> Reply[int]:
        return self.dataflows.executor(host).send(ExecutorAPI.ingest, client, seq, target, blob)

    def answered(self, calls: Sequence[Reply[int]], at_least: int, timeout_s: float
                 ) -> list[Reply[int]]:
        return answered(calls, at_least, timeout_s)

    def answer(self, call: Reply[int]) -> int:
        return call.get(timeout_s=0)

    def finish(self, calls: Sequence[Reply[int]]) -> None:
        gather_each(calls)


class Runtime(Outputs, RuntimeAPI):
    """A handle on one executor pool and its dataflows. Cheap to create; many
    processes may hold handles on the same pool."""

    def __init__(self, pool: str, controller: Any, owns_ray: bool, *, found: bool = True,
                 embedded: bool = False, like: Runtime | None = None) -> None:
        self.pool = pool
        #: the controller actor's Ray handle
        self.controller = controller
        remote = RemoteController(controller)
        # Another handle on the pool (`handle`) takes what this process knows already.
        self.config: RuntimeConfig = like.config if like is not None else \
            RuntimeConfig.from_dict(remote.config_dict())
        remote.recovery_wait_s = self.config.recovery_timeout_s
        self._controller = remote
        self._dataflows = Dataflows(remote, self.config, list(like.executors) if like is not None
                                    else remote.executor_handles())
        self._owns_ray = owns_ray
        #: whether the pool was running before `start` (see `start`)
        self.found = found
        #: whether this handle started a private Ray (it ends with this process)
        self.embedded = embedded
        self._session = PushSession(uuid.uuid4().hex, RayIngest(self._dataflows),
                                    self._dataflows, ingress_events=self.config.ingress_events,
                                    recovery_timeout_s=self.config.recovery_timeout_s)
        self._offsets: dict[tuple[str, str], int] = {}
        self._recoveries: dict[str, int] = {}
        self._deployments: dict[str, str] = {}
        self._round_robin = itertools.count()
        self._stopped = False  # shut down through this handle

    @property
    def executors(self) -> builtins.list[Any]:
        """Each executor's Ray handle, by index (None: retired for good)."""
        return self._dataflows.executors

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def start(cls, config: RuntimeConfig | None = None, *, pool: str = "default",
              address: str | None = None, run_dir: str | None = None,
              num_cpus: int | None = None, node_ip: str = "127.0.0.1",
              resume: bool = False) -> Runtime:
        """Start (or find) the pool `pool`, starting Ray first if needed.

        A new pool starts empty: what an earlier run of a pool of this name left in its
        storage (a script that ended without `shutdown`, or was killed) is deleted, unless
        `resume` asks to restore its dataflows from their checkpoints. A pool kept on
        purpose (by `cameo serve`, by a start with `resume=True`, or `shutdown(forget=False)`)
        is never deleted: starting it afresh raises `PoolKept`. A pool that is running
        (on a joined cluster) is found as it is; the handle's `found` says so, and its
        configuration is then the one it was started with.

        An embedded pool (a private Ray, `address=None`) ends with this process: at exit it
        is shut down, its storage deleted unless it was started with `resume=True`.

        Args:
            config: how the pool runs (used only when the pool is created).
            pool: the pool's name; several pools (e.g. one per scheduling mode) can coexist.
            address: a Ray cluster to join ("auto", "ray://host:10001", "host:6379");
                None starts a private local Ray.
            run_dir: where a private Ray keeps its files, and the pool its checkpoints and
                ingress logs unless `config` says where (default: ./.run).
            num_cpus: logical CPUs of a private Ray (default: 4x the cores, so that
                several pools fit; the executor count defaults to the cores).
            node_ip: the address a private Ray binds (loopback by default).
            resume: restore the dataflows an earlier run of this pool left in its storage.

        Raises:
            PoolKept: not `resume`, and the storage holds a pool kept to be restored.
            PoolInUse: not `resume`, and a process on this machine runs the pool whose
                storage this is (another script with the same pool name and run folder).
            StorageNotShared: a new pool on a Ray cluster of more than one node, its
                checkpoints or ingress logs left to the run folder of this node.
        """
        config = config or RuntimeConfig()
        opened = open_pool(config, pool, address=address, run_dir=run_dir, num_cpus=num_cpus,
                           node_ip=node_ip, resume=resume)
        rt = cls(pool, opened.controller, opened.owns_ray, found=opened.found,
                 embedded=opened.embedded)
        if not opened.found and address is not None:
            problem = unshared_storage(rt.config, rt.executors, cluster.alive_nodes())
            if problem:
                rt.shutdown(stop_ray=False)
                raise StorageNotShared(problem)
        if rt.embedded:
            atexit.register(rt._at_exit, keep=resume)
        return rt

    @classmethod
    def connect(cls, *, pool: str = "default", address: str | None = "auto", auth: str = "auto",
                log_to_driver: bool = True) -> Runtime:
        """A handle on a pool that is already running (e.g. after a service restart).

        Joins the Ray cluster at `address` first unless this process is on one;
        `auth` is Ray's token auth mode for the join ("auto", "token", "disabled").

        Raises:
            ConnectionError: Ray cannot be joined there, or this process is on another cluster.
            PoolNotFound: no pool of that name runs on the cluster.
        """
        if not ray.is_initialized():
            cluster.join(address or "auto", auth=auth, log_to_driver=log_to_driver)
        elif address not in (None, "auto") and cluster.gcs_address() != address:
            raise ConnectionError(f"this process is on the Ray cluster at {cluster.gcs_address()}, "
                                  f"not {address}: one process talks to one cluster")
        controller = cluster.find_actor(controller_name(pool))
        if controller is None:
            raise PoolNotFound(f"no cameo pool named {pool!r} on this Ray cluster; start one with "
                               "Runtime.start() or `cameo serve`")
        return cls(pool, controller, owns_ray=False)

    def handle(self, client: str | None = None) -> Runtime:
        """Another handle on the same pool, with its own ingest order (for another thread).
        `client` names its calls instead of a random id: a writer that may push the same
        events again (a retried Spark task) names them the same, and each source drops
        the calls it applied already."""
        rt = type(self)(self.pool, self.controller, owns_ray=False, like=self)
        if client is not None:
            rt._session.client = client
        return rt

    def shutdown(self, *, stop_ray: bool | None = None, forget: bool = True) -> None:
        """Stop the pool's executors and controller (and Ray, if this handle started it).
        `forget=False` keeps the registry and checkpoints: a pool started again on the
        same storage with `resume=True` restores its dataflows."""
        self._stopped = True
        self._controller.shutdown(forget)
        ray.kill(self.controller)
        if stop_ray if stop_ray is not None else self._owns_ray:
            ray.shutdown()

    def _at_exit(self, keep: bool) -> None:
        """An embedded pool ends with its process: stopped quietly before Ray's own exit
        handler takes its processes away (its storage kept only if it was resumed)."""
        if self._stopped or not ray.is_initialized() \
                or cluster.find_actor(controller_name(self.pool)) is None:
            return  # shut down already (through another handle)
        try:
            self.shutdown(forget=not keep)
        except Exception as e:  # exiting anyway: say why the storage may be left behind
            logger.warning("the pool %r did not shut down cleanly at exit: %s", self.pool, e)

    def disconnect(self) -> None:
        """Leave the Ray cluster; the pool goes on in a joined cluster (not in a private one)."""
        ray.shutdown()

    @property
    def address(self) -> str:
        """The Ray GCS address ("host:port") other processes join this pool's cluster by."""
        return str(cluster.gcs_address())

    def cluster_info(self) -> dict[str, Any]:
        """The pool and the Ray cluster it runs on, for people (`cameo serve`'s /v1/info)."""
        return {"pool": self.pool, "policy": self.config.policy, "executors": len(self.executors),
                "allowed_modules": list(self.config.allowed_modules)
                if self.config.allowed_modules is not None else None,
                "ray": {"address": self.address, "embedded": self.embedded, **cluster.info()}}

    # -- control operations: the controller's (`ControlAPI`) -------------------------------------
    def _forward(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A control operation this handle adds nothing to, made by the controller."""
        answer = getattr(self._controller, name)(*args, **kwargs)
        if name in _CHANGING:
            self._dataflows.forget(answer.get("dataflow") or answer["name"])
        return answer

    def deploy(self, dataflow: Deployable) -> str:
        """Validate and start a dataflow (a `Dataflow`, a `DataflowSpec` or a spec dict);
        returns its name. A bad spec changes nothing."""
        name = self._controller.deploy(spec_of(dataflow).to_dict())
        self._dataflows.forget(name)  # an earlier run's record (its reads and pushes follow
        return name                   # its deployment: `Outputs`, `PushSession`)

    def predict(self, dataflow: Deployable | None = None) -> Prediction:
        spec = None if dataflow is None else spec_of(dataflow).to_dict()
        return self._controller.predict(spec)

    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo:
        """Spec, placement and lifecycle. Cached for up to a second
        (`client.dataflows.DESCRIBE_TTL_S`), so that pushes cost no extra call and still
        learn within a second that a dataflow ended; `refresh` asks the controller now."""
        return self._dataflows.describe(name, refresh=refresh)

    def add_executors(self, n: int = 1) -> builtins.list[int]:
        added = self._controller.add_executors(n)
        self._dataflows.refresh_executors()
        return added

    # -- input ----------------------------------------------------------------------------------
    def push(self, name: str, source: str, events: Sequence[Event] | pa.RecordBatch | pa.Table,
             *, batch_size: int = DEFAULT_BATCH) -> builtins.list[Rejected]:
        """Send events to a source of a running dataflow, in batches.

        Returns when the batches are handed over; blocks while the source has
        too many events waiting (backpressure). Events keep their order per
        source instance. One handle pushes from one thread at a time: feed
        from several threads with a handle each (`handle()`).

        Returns the events refused here because msgpack cannot carry them (an int
        beyond 64 bits, a Decimal, nesting deeper than 128 levels, ...): each also
        goes to the error output (kind "unencodable"), and the rest of its batch goes
        on. Events that do not match the schema are found later, by the source, and
        show in the error output only (kind "malformed").

        Columns (a `pyarrow.RecordBatch` or `Table`) travel as Arrow, without an object
        per event, and run as columns where a step has a kernel for them (`columns.py`);
        results are the same as for the same events as dicts. Their columns are checked
        against the source's schema first: a column missing, or of a type that cannot
        hold its field, raises `ColumnsRefused` (a ValueError) and nothing is sent.
        """
        targets = self._dataflows.source_instances(name, source)  # checks the source
        if isinstance(events, (pa.RecordBatch, pa.Table)):
            step = next(s for s in self._dataflows.spec(name).sources if s.id == source)
            for batch in conform(source, events, step.schema):
                for i in range(0, batch.num_rows, batch_size):
                    self._session.send(name, self._next(targets),
                                       pack_columns(batch.slice(i, batch_size)))
            return []
        rejected: builtins.list[Rejected] = []
        for i in range(0, len(events), batch_size):
            # Packed before the call takes its sequence number: an event that cannot be
            # packed must not leave a gap that the executor's in-order delivery waits on.
            packed = pack_ingest(source, list(events[i:i + batch_size]), i)
            self._session.send(name, self._next(targets), packed.blob)
            rejected += packed.rejected
        return rejected

    def _next(self, targets: builtins.list[str]) -> str:
        """The source instance a batch goes to: in turn."""
        return targets[next(self._round_robin) % len(targets)]

    def watermark(self, name: str, source: str, ts: float) -> None:
        """Declare that no event older than `ts` will follow on `source`."""
        for target in self._dataflows.source_instances(name, source):
            self._session.send(name, target, pack_events([float(ts)]))

    def close(self, name: str) -> None:
        """End every source of the dataflow: all windows fire, it drains (`finishing`)
        and then is `finished`, its results still readable."""
        self.flush()  # every batch before it in (sent again after a failure, if need be)
        for src in self._dataflows.spec(name).sources:
            self.watermark(name, src.id, END_OF_STREAM)
        self.flush()
        self._controller.closing(name)

    def flush(self) -> None:
        """Wait until every pushed batch was accepted by its executor (written to its
        source's ingress log: it survives a failure from then on). Batches to a dataflow
        that failed or was cancelled meanwhile are dropped: it takes no more input."""
        self._session.flush()

    def pressure(self, name: str) -> Pressure:
        """Whether the dataflow can take more events now, in one parallel round of calls
        that never wait on a busy executor: its full result logs (a reader is behind) and
        the events waiting at its sources against the limit (`ingress_events`). A log is
        full when the events taken in and not yet at the sinks (waiting at the sources or
        queued between steps) would fill it: a guess on the high side for steps that
        filter or aggregate, so the refusals start a little early, when the log is nearly
        full anyway."""
        flows = self._dataflows
        answers = flows.ask(name, lambda i: [
            reply.get() for reply in [flows.executor(h).send(ExecutorAPI.pressure, name)
                                      for h in i["executors"]]])
        waiting: dict[str, int] = {}
        room_here: dict[str, int] = {}
        inside = 0
        for part in answers:
            waiting.update(part.waiting)
            room_here.update(part.rooms)
            inside += part.inside
        taken_in = sum(waiting.values()) + inside
        rooms = {sink: max(0, room - taken_in) for sink, room in room_here.items()}
        return {"full_sinks": sorted(s for s, room in rooms.items() if room == 0),
                "rooms": rooms, "waiting": waiting, "limit": self.config.ingress_events}

    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None:
        """Block until every event pushed so far to `dataflows` (None: every dataflow of
        the pool) was processed and every result it made can be read: no message queued
        or in flight between executors, no migration or recovery under way, and under
        exactly-once delivery a checkpoint completed after the last result (taken now if
        none is due). Events pushed through this handle are flushed first.

        Name the dataflows in a pool that other tenants keep busy: the pool as a whole
        is idle only when nobody pushes. After `close(name)`, `wait_idle(dataflows=[name])`
        returns once its last results (every window fired) are readable.

        Raises:
            TimeoutError: not so within `timeout_s`; the message says what was under way.
            DataflowEnded: a dataflow named in `dataflows` was cancelled or failed.
            DataflowNotFound: no dataflow of a name in `dataflows`.
        """
        self.flush()
        names = None if dataflows is None else builtins.list(dataflows)
        deadline = time.monotonic() + timeout_s
        pause = 0.002
        while True:
            waiting, to_checkpoint = self._unsettled(names)
            if not waiting and to_checkpoint:
                left = max(1.0, deadline - time.monotonic())
                made = self._controller.checkpoint_now(to_checkpoint, left)
                waiting = [f"{n}: results wait for a checkpoint, which did not complete "
                           "(see describe(name)['checkpoints'])" for n, ok in made.items() if not ok]
                if not waiting:
                    continue  # the next round sees them readable
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"not settled after {timeout_s:g} s: " + "; ".join(waiting[:6])
                                   + (f"; and {len(waiting) - 6} more" if len(waiting) > 6 else ""))
            time.sleep(pause)
            pause = min(0.05, 2 * pause)

    def _unsettled(self, names: builtins.list[str] | None
                   ) -> tuple[builtins.list[str], builtins.list[str]]:
        """(why the dataflows are not settled yet, those settled but for a checkpoint that
        makes their results readable), from one call to the controller and one round of
        calls to the executors hosting them (`settle.py`)."""
        pool = self._controller.settling(names)
        waiting, live = settle.pool_reasons(pool, named=names is not None)
        if waiting:
            return waiting, []
        listed = builtins.list(pool["dataflows"])
        answers = gather_each([self._dataflows.executor(i).send(ExecutorAPI.unsettled, listed)
                               for i in live])
        return settle.executor_reasons(listed, dict(zip(live, answers, strict=True)))

    # -- for the service (cameo serve): one-round snapshots ---------------------------------------
    def stats_all(self) -> PoolSnapshot:
        """Counters of every dataflow and executor of the pool in one parallel round of
        Ray calls (what a metrics scrape needs). A dataflow cancelled while the round runs
        is left out, and so is an executor that does not answer."""
        listed = self.list(states=(*LIVE_STATES, FINISHED))
        controller = Actor[ControllerAPI](self.controller)
        executors = [e for e in self.executors if e is not None]  # (not the retired)
        replies = [Actor[ExecutorAPI](e).send(ExecutorAPI.executor_stats) for e in executors]
        lifecycle = controller.send(ControllerAPI.lifecycle_counts)
        overload = controller.send(ControllerAPI.predict, None)
        critical = controller.send(ControllerAPI.critical_path)
        parts: builtins.list[tuple[Reply[DataflowInfo], builtins.list[Reply[DataflowPart]]]] = []
        for d in listed:
            if any(self.executors[i] is None for i in d["executors"]):
                continue  # a part on a retired executor: left out, as one that does not answer
            parts.append((controller.send(ControllerAPI.describe, d["name"]),
                          [Actor[ExecutorAPI](self.executors[i]).send(
                              ExecutorAPI.dataflow_stats, d["name"]) for i in d["executors"]]))
        stats = gather_each(replies)
        dataflows: builtins.list[DataflowMetrics] = []
        for info_reply, part_replies in parts:
            info, answers = gather_each([info_reply])[0], gather_each(part_replies)
            answered = [a for a in answers if a is not None]
            if info is not None and len(answered) == len(answers):
                dataflows.append(dataflow_metrics(info, answered))
        transitions, states = lifecycle.get()
        return {"dataflows": dataflows, "executors": [s for s in stats if s is not None],
                "transitions": transitions, "states": states, "migrations": self.migrations(),
                "overload": overload.get(), "critical_path": critical.get()}

