"""A rolling upgrade from the last released version to this one, while a dataflow runs.

The cluster (`ray start` processes on loopback: a head and two workers) and the service
run the code of an older commit (`UPGRADE_FROM`, taken from the repository's history
with `git archive`) from a folder on their PYTHONPATH, as a node runs what is installed
on it. The dataflow is pushed to throughout. Then this version is installed in that
folder, over the old files, and the procedure of docs/service.md runs: the service
replaced (the new one replaces the controller, which runs other code), then each node
drained, replaced (the head: its executor retired and started again) and given
executors again. Old and new code run side by side meanwhile (a new service and
controller with old executors). At the end every executor reports the new version,
and the results are exactly `run_local`'s.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import cameo_actors
from cameo_actors import run_local
from cameo_actors.service.testing import LocalCluster, ServiceProcess, fresh_dir, processes_under
from tests.integration.test_node_loss import keyed_window, pusher
from tests.integration.test_service_cluster import wait_until
from tests.integration.test_service_limits import read_on
from tests.shared.zoo import canon, events

pytestmark = pytest.mark.integration

#: The version upgraded from: the last commit that landed before this test's (bump it
#: when a release lands, so that the test always upgrades from what users run). Here the
#: first commit with each process boundary declared as an interface: the versions before
#: it called executors by other names and arguments, from other modules, so they are
#: upgraded with a restart, not rolled (docs/service.md, the bullet "Upgrading").
UPGRADE_FROM = "f554fd4c36e6478cebb947da26707190a91f1762"
OLD, NEW = "0.1.0+old", "0.1.0+upgraded"
RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-upgrade"))
REPO = Path(cameo_actors.__file__).resolve().parent.parent


def install(code: Path, package: bytes | Path, version: str) -> None:
    """The package `cameo_actors` in `code`, from a tar of it or a folder, named `version`."""
    shutil.rmtree(code / "cameo_actors", ignore_errors=True)
    if isinstance(package, Path):
        shutil.copytree(package, code / "cameo_actors",
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        with tarfile.open(fileobj=io.BytesIO(package)) as tar:
            tar.extractall(code, filter="data")
    init = code / "cameo_actors" / "__init__.py"
    text = init.read_text(encoding="utf-8")
    assert '__version__ = "0.1.0"' in text
    init.write_text(text.replace('__version__ = "0.1.0"', f'__version__ = "{version}"'),
                    encoding="utf-8")


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True)


@pytest.fixture(scope="module")
def old_code() -> bytes:
    """The package as of `UPGRADE_FROM`, fetched from the clone's origin when the clone
    lacks it (a shallow clone): never skipped."""
    if git("cat-file", "-e", f"{UPGRADE_FROM}^{{commit}}").returncode != 0:
        fetched = git("fetch", "--quiet", "--depth", "1", "origin", UPGRADE_FROM)
        assert fetched.returncode == 0, (
            f"the version to upgrade from, {UPGRADE_FROM[:10]}, is not in this clone and "
            f"its origin did not give it ({fetched.stderr.decode().strip()}); fix: clone with "
            "its history (`git fetch --unshallow`)")
    return subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", UPGRADE_FROM,
                           "cameo_actors"], capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def code(old_code: bytes) -> Path:
    folder = Path(fresh_dir(RUN_DIR)) / "code"
    folder.mkdir()
    install(folder, old_code, OLD)
    return folder


#: An old process as during the upgrade: the old modules an executor loads at its start,
#: then this version's files in their place (modules not loaded yet come from those), and
#: the actor classes of this version loaded as Ray loads them (`ray.cloudpickle`).
OLD_PROCESS = """
import os, sys
old, new = sys.argv[1:]
sys.path.insert(0, old)
import cameo_actors.runtime._private.executor.actor, cameo_actors.runtime._private.controller.actor
for name, module in list(sys.modules.items()):
    if name.startswith("cameo_actors") and hasattr(module, "__path__"):
        module.__path__.append(os.path.join(new, *name.split(".")))
import ray.cloudpickle
print([c.__name__ for c in ray.cloudpickle.loads(sys.stdin.buffer.read())])
"""


def test_an_old_process_loads_this_version_s_actor_classes(code: Path) -> None:
    """An old process given a handle of a new actor (an old executor linked to a new one)
    loads the actor's class by value, with the module-level names its methods use looked
    up in the modules it has loaded: old ones. One the old version lacks fails the load,
    and Ray then calls the actor through a stand-in whose methods take no positional
    argument: every batch from an old executor to a new one failed, and the drain's
    checkpoint below never completed. (Runs first, while `code` holds the old version.)"""
    import ray.cloudpickle

    from cameo_actors.runtime._private.codebase import code_id
    from cameo_actors.runtime._private.controller.actor import Controller
    from cameo_actors.runtime._private.executor.actor import Executor

    classes = [a.__ray_metadata__.modified_class for a in (Executor, Controller)]
    blob = ray.cloudpickle.dumps(classes)
    loaded = subprocess.run([sys.executable, "-c", OLD_PROCESS, str(code), str(REPO)], input=blob,
                            capture_output=True, cwd=str(code))
    assert loaded.returncode == 0, (
        f"the version upgraded from ({UPGRADE_FROM[:10]}) cannot load this version's actor "
        f"classes: {loaded.stderr.decode()[-1500:]}\nFix: reach what their methods use and "
        "the old version lacks through an object (`core.ingress.events_in`), not an import")
    # This version's classes, by their versioned names (`codebase.versioned`)
    assert loaded.stdout.decode().strip() == str([c.__name__ for c in classes])
    assert all(c.__name__.endswith(f"_{code_id()}") for c in classes)


@pytest.fixture(scope="module")
def cluster(code: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(os.path.join(RUN_DIR, "ray"), cpus=(1, 1, 1))
    c.env["PYTHONPATH"] = str(code)  # what is installed on every node
    c.start()
    yield c
    c.stop()


def test_a_rolling_upgrade_from_the_last_version_loses_and_repeats_nothing(
        code: Path, cluster: LocalCluster) -> None:
    storage = os.path.join(RUN_DIR, "shared")
    service = ServiceProcess(os.path.join(RUN_DIR, "service"), env=cluster.env, cwd=str(code),
                             args=["--address", cluster.address, "--executors", "3",
                                   "--pool", "upgrade", "--checkpoint-interval", "0.5",
                                   "--checkpoint-url", os.path.join(storage, "checkpoints"),
                                   "--ingress-log-dir", os.path.join(storage, "ingress")])
    service.start()
    try:
        c = service.client()
        assert c.info()["version"] == OLD
        flow = keyed_window("upgraded", parallelism=3)
        c.submit(flow)
        data = events(24_000, seed=12)
        want = canon(run_local(flow, {"s": data})["o"])
        push_next = pusher(c, "upgraded", data)  # (the client stays valid across restarts)
        push_next()
        install(code, REPO / "cameo_actors", NEW)  # the new version, over the old files

        # 1. The service: the old one crashes (or is stopped with --on-shutdown keep);
        # the new one finds the pool's controller running other code and replaces it:
        # the new controller reads the registry back and adopts the executors.
        service.kill()
        service.start()
        c = service.client()
        assert c.info()["version"] == NEW
        assert "runs other code" in service.log() and "replacing it" in service.log()
        push_next()
        # 2. A crash of the new controller: Ray starts it again, with the code installed.
        controller = next(pid for pid, (_, command) in processes_under(cluster.nodes[0].pid)
                          .items() if command.startswith("ray::Controller"))
        os.kill(controller, signal.SIGKILL)
        push_next()
        # 3. Each worker node: drained, replaced by one with the new code, given executors.
        for number in (1, 2):
            c.drain_node(cluster.node_ip(number))
            cluster.stop_node(number)
            cluster.add_node(1)
            c.add_executors(1)
            push_next()
        # 4. The head (it stays: the cluster's): its executor retired, one started again.
        c.drain_node(cluster.node_ip(0))
        c.add_executors(1)
        push_next()

        live = [e for e in c.executors() if e.get("alive", True)]
        assert len(live) == 3 and {e.get("version") for e in live} == {NEW}, live
        assert len({e["code"] for e in live}) == 1
        c.close("upgraded")
        wait_until(lambda: c.status("upgraded")["state"] == "finished", "finished", 120)
        got, _ = read_on(c, "upgraded", None, len(want), timeout_s=60.0)
        assert Counter(canon(got)) == Counter(want)
        assert c.status("upgraded")["recoveries"] <= 3  # one per node drained
    finally:
        service.stop()
