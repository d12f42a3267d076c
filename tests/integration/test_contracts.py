"""What a user relies on, with everything on (checkpoints every 2 s, exactly-once results):
a script's second run starts an empty pool, a kept pool is restored only on purpose,
and a wait that returns means that every result of the events pushed so far can be
read, through live rescales, migrations, lessees and recoveries at random points.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cameo_actors import Dataflow, ReconfigFailed, count, max_, run_local, sum_
from cameo_actors.errors import ReconfigConflict
from tests.integration.test_recovery import diff, kill_executor, pid_of
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
WINDOW = "win"


def readme_example() -> str:
    """The code of the README's "Ten lines" section, as a user copies it."""
    text = README.read_text()
    section = text[text.index("## Ten lines"):]
    return section[section.index("```python") + len("```python"):section.index("```\n", 10)]


def run_script(folder: Path, code: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
    """`code` as a script of its own in `folder` (its own private Ray and run folder)."""
    script = folder / "script.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "CAMEO_"))}
    return subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True,
                          text=True, timeout=timeout_s, env=env)


def test_the_readme_example_runs_twice_with_the_same_output(tmp_path: Path) -> None:
    code = readme_example()
    runs = [run_script(tmp_path, code) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
    # The same results both times (the p99 printed after them is a measurement).
    results = [re.sub(r"\] [0-9.]+$", "]", run.stdout.strip()) for run in runs]
    assert results[0] == results[1] == \
        "[{'ts': 1, 'level': 'ERROR', 'key': 'a', 'value': 99.0}]", runs[0].stdout
    # The pool's processes (its private Ray keeps its files under the folder) ended with it.
    deadline = time.monotonic() + 10.0
    while processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_under(tmp_path) == []


def processes_under(folder: Path) -> list[str]:
    """Command lines of the processes that name `folder` (Ray's name their session dir)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile
            continue
        if str(folder) in cmd and int(pid) != os.getpid():
            found.append(cmd[:200])
    return found


KEEP = """
from cameo_actors import Dataflow, Runtime
rt = Runtime.start(resume=True)
print(sorted(d["name"] for d in rt.list()))
if not rt.list():
    rt.deploy(Dataflow("kept", latency_target_ms=50)
              .source("s", schema={"ts": "int"}, event_time="ts").sink("o"))
"""


def test_a_kept_pool_is_restored_only_when_asked(tmp_path: Path) -> None:
    first = run_script(tmp_path, KEEP)
    assert first.returncode == 0 and first.stdout.strip() == "[]", first.stderr[-3000:]
    refused = run_script(tmp_path, "from cameo_actors import Runtime\nRuntime.start()\n")
    assert refused.returncode == 1
    assert "PoolKept" in refused.stderr and "resume=True" in refused.stderr, refused.stderr
    again = run_script(tmp_path, KEEP)
    assert again.returncode == 0 and again.stdout.strip() == "['kept']", again.stderr[-3000:]


HOLD = """
import sys
from cameo_actors import Dataflow, Runtime
rt = Runtime.start()
rt.deploy(Dataflow("held", latency_target_ms=50)
          .source("s", schema={"ts": "int"}, event_time="ts").sink("o"))
print("up", flush=True)
sys.stdin.readline()
"""


def test_a_pool_in_use_is_left_alone_by_another_start(tmp_path: Path) -> None:
    (tmp_path / "hold.py").write_text(HOLD)
    holder = subprocess.Popen([sys.executable, "hold.py"], cwd=tmp_path, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "up"
        second = run_script(tmp_path, "from cameo_actors import Runtime\nRuntime.start()\n")
        assert second.returncode == 1
        assert "PoolInUse" in second.stderr and "pool=" in second.stderr, second.stderr[-2000:]
    finally:
        holder.stdin.close()
    assert holder.wait(120) == 0, holder.stderr.read()[-2000:] if holder.stderr else ""


# -- waits ------------------------------------------------------------------------------------
def sliding(name: str) -> Dataflow:
    """A keyed sliding window over out-of-order events (the shape that found the bug)."""
    return (Dataflow(name, latency_target_ms=1000, tenant="analytics")
            .source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
            .key_by("key").window(sliding_ms=60, slide_ms=20, id=WINDOW)
            .aggregate(n=count(), total=sum_("value"), hi=max_("value")).sink("o"))


class Feed(threading.Thread):
    """Pushes events in batches from a handle of its own, steadily."""

    def __init__(self, rt: Any, name: str, data: list[dict[str, Any]], pause_s: float) -> None:
        super().__init__(daemon=True)
        self.rt, self.df, self.data, self.pause_s = rt.handle(), name, data, pause_s
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(0, len(self.data), 300):
                self.rt.push(self.df, "s", self.data[i:i + 300])
                time.sleep(self.pause_s)
            self.rt.flush()
        except BaseException as e:  # reported by the test
            self.error = e


def closed_and_read(rt: Any, name: str, feed: Feed) -> list[dict[str, Any]]:
    """Join the feed, close the dataflow, wait, and read: right after the wait, once."""
    feed.join(120)
    assert feed.error is None, feed.error
    rt.close(name)
    rt.wait_idle(120, dataflows=[name])
    return list(rt.results(name))


def test_results_are_readable_when_the_wait_after_live_rescales_returns(pools: Any) -> None:
    rt = pools["elastic2"]
    flow = sliding("ct-rescale")
    data = events(20_000, seed=11, keys=200)
    rt.deploy(flow)
    feed = Feed(rt, "ct-rescale", data, pause_s=0.01)
    feed.start()
    up = rt.scale("ct-rescale", WINDOW, 2, wait=True)
    assert up["state"] == "done" and up["to_parallelism"] == 2
    # Not waited for, and long (one bin per epoch): the wait below must cover it. (The
    # wait of before returned while it ran, with none of the results readable.)
    rt.scale("ct-rescale", WINDOW, 1, strategy="fluid")
    got = closed_and_read(rt, "ct-rescale", feed)
    want = canon(run_local(flow, {"s": data}).sinks["o"])
    assert canon(got) == want, diff(got, want)
    assert [m["state"] for m in rt.migrations("ct-rescale")][-2:] == ["done", "done"]
    rt.cancel("ct-rescale")


#: Changes each run makes; refused ones (one under way, an executor restarting) are tried
#: again, up to `TRIES` in all.
CHANGES, TRIES = 5, 20
REFUSED = "not made"


def random_change(rt: Any, name: str, rng: random.Random, lessees: list[int]) -> str:
    """One reconfiguration or failure at random; what it was, for the failure message
    (starting with `REFUSED` if it did not happen)."""
    choice = rng.choice(["scale", "migrate", "lease", "kill"])
    wait = rng.random() < 0.5
    try:
        if lessees[0]:  # no bins move while the window has lessees: give them back first
            rt.lease(name, WINDOW, 0, wait=True)
            lessees[0] = 0
            return "lessees given back"
        if choice == "scale":
            p = rng.randint(1, 3)
            rt.scale(name, WINDOW, p, strategy=rng.choice(["batched", "all_at_once"]), wait=wait)
            return f"scale to {p}{' (waited)' if wait else ''}"
        if choice == "migrate":
            hosts = rt.describe(name, refresh=True)["hosts"]
            instance, on = next((int(a.rsplit("/", 1)[1]), ex) for a, ex in hosts.items()
                                if f"/{WINDOW}/" in a)
            rt.migrate(name, WINDOW, instance=instance, to_executor=1 - on, wait=wait)
            return f"instance {instance} to executor {1 - on}"
        if choice == "lease":
            rt.lease(name, WINDOW, 1, wait=True)
            lessees[0] = 1
            return "a lessee"
        victim = rng.randrange(2)
        if pid_of(rt, victim) is None:
            return f"{REFUSED}: executor {victim} not killed, restarting still"
        kill_executor(rt, victim)
        return f"executor {victim} killed"
    except (ReconfigConflict, ReconfigFailed) as e:  # one under way, or a kill got in its way
        return f"{REFUSED}: {choice}, {type(e).__name__}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_waits_hold_through_random_changes_and_recoveries(pools: Any, seed: int) -> None:
    rt = pools["phoenix2"]
    rng = random.Random(seed)
    name = f"ct-chaos-{seed}"
    flow = sliding(name)
    data = events(16_000, seed=seed, keys=100)
    rt.deploy(flow)
    feed = Feed(rt, name, data, pause_s=0.02)
    feed.start()
    done: list[str] = []
    lessees = [0]
    while sum(not d.startswith(REFUSED) for d in done) < CHANGES:
        assert len(done) < TRIES, f"{CHANGES} changes not made in {TRIES} tries: {done}"
        time.sleep(rng.uniform(0.1, 0.5))
        done.append(random_change(rt, name, rng, lessees))
    got = closed_and_read(rt, name, feed)
    print(f"{name}: {done}")
    want = canon(run_local(flow, {"s": data}).sinks["o"])
    assert canon(got) == want, f"after {done}: {diff(got, want)}"
    rt.cancel(name)
