"""Integration tests: a real local Ray, started once for the whole session.

Executor pools are created lazily, one per configuration, and shared by the
tests; every test deploys dataflows under its own names and cancels them, and
those a failed test left live are cancelled after it, so that its failure is
not the next test's too. A pool is shut down after the last module that names it:
idle, the fourteen pools took about 0.9 of this machine's two cores (their monitors,
checkpoint and snapshot timers), which every later test ran beside. The modules that
name no pool run first, then the others in `POOL_MODULES`' order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator
from typing import Any

import pytest

RUN_DIR = os.path.abspath(os.environ.get("CAMEO_RUN_DIR", ".run"))

#: name -> RuntimeConfig keyword arguments
POOLS: dict[str, dict[str, Any]] = {
    "cameo2": dict(num_executors=2, policy="cameo"),
    "fifo1": dict(num_executors=1, policy="fifo"),
    "edf2": dict(num_executors=2, policy="edf"),
    "fair2": dict(num_executors=2, policy="fair_share"),
    "isolated2": dict(num_executors=2, policy="fifo", isolation="isolated"),
    "tiny_credits": dict(num_executors=2, policy="cameo", credit_events=50, ingress_events=100,
                         result_capacity=300),
    # The lifecycle's monitor checks often, so tests see transitions within a second.
    "watched2": dict(num_executors=2, policy="cameo", monitor_interval_s=0.2),
    # Executors are added and removed here (test_reconfig.py only); 256 bins keep fluid
    # migrations short.
    "elastic2": dict(num_executors=2, policy="cameo", bins=256, monitor_interval_s=0.2),
    # Self-scaling (test_scaling.py): keyed instances of a fixed speed, so that added
    # executors add capacity; fast rounds and short windows, so that tests take seconds.
    "scaled2": dict(num_executors=2, policy="cameo", bins=256, service_capacity_eps=1000,
                    credit_events=1000, monitor_interval_s=0.2, recovery_timeout_s=5.0,
                    scaling={"policy": "ds2", "interval_s": 0.5, "rate_window_s": 2.0,
                             "warmup_s": 2.0, "scale_down_window_s": 4.0, "max_executors": 3,
                             "max_parallelism": 3, "deadline_aware": False}),
    # Executors are killed here: a pool of its own, one executor per dataflow.
    "doomed3": dict(num_executors=3, policy="cameo", isolation="isolated", monitor_interval_s=0.2,
                    checkpoint_interval_s=0.5),
    # Executors are killed at random here (test_recovery.py's chaos test); short checkpoint
    # intervals keep recoveries and exactly-once results prompt; restores read the executors'
    # local copies of their parts (on by default only for storage that is not a folder).
    "phoenix2": dict(num_executors=2, policy="cameo", checkpoint_interval_s=0.5,
                     monitor_interval_s=0.2, local_recovery=True),
    # Admission control refuses here (test_overload.py): a pool of its own, so that only
    # that test's load is measured.
    "gate2": dict(num_executors=2, policy="cameo", admission="refuse", monitor_interval_s=0.5),
    # Critical paths (test_critical_path.py): short snapshots, so explanations come soon.
    "traced2": dict(num_executors=2, policy="cameo", trace_snapshot_s=0.5),
    "tracedfifo1": dict(num_executors=1, policy="fifo", trace_snapshot_s=0.5),
}


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    from cameo_actors.runtime import start_local_ray

    # Every pool of POOLS reserves a CPU per executor, mostly idle, and they all stay up
    # (27 executors); room for them, the executors the scaling and reconfiguration tests
    # add, and the benchmarks' pools beside them (32 were once all taken when
    # test_scaling's pool asked for a third executor).
    start_local_ray(RUN_DIR, num_cpus=sum(p["num_executors"] for p in POOLS.values()) + 16)
    yield
    ray.shutdown()


class Pools:
    def __init__(self) -> None:
        self._made: dict[str, object] = {}
        self.touched: set[str] = set()  # by the running test
        # Checkpoints and ingress logs of this session only: a pool of the same name in an
        # earlier (or a parallel) session must not hand its registry over to this one.
        os.makedirs(RUN_DIR, exist_ok=True)
        self.storage = tempfile.mkdtemp(prefix="test-storage-", dir=RUN_DIR)

    def __getitem__(self, name: str):  # type: ignore[no-untyped-def]
        from cameo_actors.runtime import Runtime, RuntimeConfig

        if name not in self._made:
            config = RuntimeConfig(**POOLS[name],
                                   checkpoint_url=os.path.join(self.storage, "checkpoints", name),
                                   ingress_log_dir=os.path.join(self.storage, "ingress", name),
                                   local_recovery_dir=os.path.join(self.storage, "local", name))
            self._made[name] = Runtime.start(config, pool=f"test-{name}")
        self.touched.add(name)
        return self._made[name]

    def cancel_leftovers(self) -> None:
        """Cancel the live dataflows on the pools the test used."""
        from cameo_actors.runtime.lifecycle import LIVE_STATES

        for name in sorted(self.touched):
            rt = self._made[name]
            for d in rt.list(LIVE_STATES):  # type: ignore[attr-defined]
                rt.cancel(d["name"])  # type: ignore[attr-defined]

    def close_after(self, module: str) -> None:
        """Shut down the pools no test after `module` names (their storage stays)."""
        for name in [n for n in self._made if LAST_MODULE.get(n) == module]:
            self._made.pop(name).shutdown(stop_ray=False)  # type: ignore[attr-defined]

    def close(self) -> None:
        for rt in self._made.values():
            rt.shutdown(stop_ray=False)  # type: ignore[attr-defined]
        shutil.rmtree(self.storage, ignore_errors=True)


#: pool -> the last collected test module whose text names it (quoted)
LAST_MODULE: dict[str, str] = {}
_SESSION_POOLS: list[Pools] = []


#: The modules that name pools, in the order they run, after every module that names none
#: (unlisted ones last): a pool is up from its first module to its last, so this order
#: keeps few of them idle at a time. In alphabetical order, the node-loss, service and
#: upgrade tests ran beside three to five idle pools, about half a core.
POOL_MODULES = ("test_critical_path", "test_overload", "test_scaling", "test_lifecycle",
                "test_recovery", "test_kafka", "test_spark_recovery", "test_contracts", "test_reconfig",
                "test_runtime", "test_spark", "test_nexmark", "test_nexmark_spark",
                "test_spark_failures", "test_tier_equivalence", "test_console")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    texts = {str(item.path): item.path.read_text() for item in items}
    named = {module: [n for n in POOLS if f'"{n}"' in text or f"'{n}'" in text]
             for module, text in texts.items()}

    def rank(item: pytest.Item) -> tuple[int, int]:
        if not named[str(item.path)]:
            return (0, 0)
        stem = item.path.stem
        return (1, POOL_MODULES.index(stem) if stem in POOL_MODULES else len(POOL_MODULES))

    items.sort(key=rank)  # stable: each module's tests stay together, in their order
    for item in items:
        for name in named[str(item.path)]:
            LAST_MODULE[name] = str(item.path)


@pytest.fixture(scope="session")
def pools(ray_session: None) -> Iterator[Pools]:
    p = Pools()
    _SESSION_POOLS.append(p)
    yield p
    _SESSION_POOLS.clear()
    p.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _pools_left_empty(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that failed, the dataflows it left live on the shared pools."""
    yield
    if "pools" in request.fixturenames:
        pools = request.getfixturevalue("pools")
        if request.node.stash.get(FAILED, False):
            pools.cancel_leftovers()
        pools.touched.clear()


# -- Spark (the Spark tier's tests): one SparkSession for the whole session ------------------
_SPARK: list[object] = []


def _stop_spark() -> None:
    """Stop the session and its JVM, and with the gateway py4j's background thread."""
    from pyspark import SparkContext

    while _SPARK:
        session = _SPARK.pop()
        for query in session.streams.active:  # type: ignore[attr-defined]
            query.stop()
        session.stop()  # type: ignore[attr-defined]
        gateway = SparkContext._gateway
        if gateway is not None:
            gateway.shutdown()
            proc = getattr(gateway, "proc", None)
            if proc is not None and proc.stdin is not None:
                proc.stdin.close()  # the JVM's launcher exits when its stdin closes
                proc.wait(timeout=60)
            SparkContext._gateway = None
            SparkContext._jvm = None


@pytest.fixture(scope="session")
def spark(ray_session: None) -> Iterator[object]:
    """A local SparkSession with the `cameo` format registered (started once: 5-10 s)."""
    import shutil

    from spark_ingest.session import SparkConfig, build_session

    run = os.path.join(RUN_DIR, "spark-tests")
    shutil.rmtree(run, ignore_errors=True)  # checkpoints and outputs of an earlier session
    _SPARK.append(build_session(SparkConfig(run_dir=run, log_level="ERROR")))
    yield _SPARK[0]
    _stop_spark()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    """Once a test's fixtures are torn down: after its module, the pools no later module
    names; Spark once the integration tests are done (unit tests run after them in one
    session block time.sleep, which py4j's background thread calls)."""
    yield
    if _SESSION_POOLS and (nextitem is None or nextitem.path != item.path):
        _SESSION_POOLS[0].close_after(str(item.path))
    if _SPARK and (nextitem is None or "integration" not in nextitem.path.parts):
        _stop_spark()
