"""Fault tolerance on a real local Ray: executors SIGKILLed while dataflows run are
restarted by Ray and what they hosted is restored from its last checkpoint, the
sources' ingress logs replayed; the results stay exactly run_local's (nothing lost,
nothing twice). The dataflows elsewhere never stop. Without checkpoints a dataflow
fails with its executor; a controller killed is restarted and adopts the executors.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from cameo_actors import Dataflow, count, run_local, sum_
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime.boundary import FINISHED, RECOVERING, RUNNING
from tests.integration.test_lifecycle import errors_only, state_of, wait_for
from tests.integration.test_lifecycle import events as log_events
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

Rows = list[dict[str, Any]]
#: How soon after a restore a dataflow completes a checkpoint again (interval 0.5 s).
CHECKPOINT_AFTER_S = 15.0


# -- dataflows ------------------------------------------------------------------------------
def _df(name: str, tenant: str) -> Dataflow:
    return Dataflow(name, latency_target_ms=1000, tenant=tenant)


def _src(d: Dataflow, sid: str = "s"):  # type: ignore[no-untyped-def]
    return d.source(sid, schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)


def keyed_window(name: str, tenant: str = "chaos", parallelism: int = 2) -> Dataflow:
    d = _df(name, tenant)
    (_src(d).key_by("key").window(tumbling_ms=50, parallelism=parallelism)
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


def keyed_join(name: str, tenant: str = "chaos") -> Dataflow:
    d = _df(name, tenant)
    left = _src(d, "l").filter("level == 'ERROR'").key_by("key")
    right = _src(d, "r").filter("level == 'WARN'").key_by("key")
    (left.join(right, tumbling_ms=40)
     .map({"key": "key", "ts": "ts", "lv": "left.value", "rv": "right.value"}).sink("o"))
    return d


def a_filter(name: str, tenant: str = "chaos", predicate: str = "level == 'ERROR' and value > 50"
             ) -> Dataflow:
    d = _df(name, tenant)
    _src(d).filter(predicate).map({"ts": "ts", "key": "key", "v": "value"}).sink("o")
    return d


def expected(flow: Dataflow, inputs: dict[str, Rows]) -> list[str]:
    rows = run_local(flow, inputs).sinks[flow.spec.sinks[0].id]
    assert rows, f"{flow.name}: the reference produced nothing; the test data is off"
    return canon(rows)


def diff(got: Rows, want: list[str]) -> str:
    """What differs between two multisets of results, briefly."""
    g, w = Counter(canon(got)), Counter(want)
    twice, missing = g - w, w - g
    return (f"{len(got)} rows, {len(want)} expected; {sum(twice.values())} extra or repeated "
            f"(e.g. {list(twice)[:2]}), {sum(missing.values())} missing (e.g. {list(missing)[:2]})")


# -- executors and lifecycle ---------------------------------------------------------------
def pid_of(rt: Any, index: int) -> int | None:
    for e in rt.executor_stats():
        if e["executor"] == index:
            return e.get("pid")
    return None


def kill_executor(rt: Any, index: int) -> tuple[int, float]:
    """SIGKILL executor `index`; (its pid, the time just before)."""
    pid = pid_of(rt, index)
    assert pid is not None, f"executor {index} does not answer: {rt.executor_stats()}"
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    return pid, at


def history(rt: Any, name: str) -> list[dict[str, Any]]:
    return list(rt.describe(name, refresh=True)["history"])


def recovered_since(rt: Any, name: str, since: float) -> bool:
    """`name` entered recovering after `since` and runs (or drains) again."""
    h = history(rt, name)
    assert h[-1]["state"] not in ("failed", "cancelled"), f"{name}: {h[-1]}"
    return h[-1]["state"] != RECOVERING and any(
        t["state"] == RECOVERING and t["at"] >= since for t in h)


def checkpointed_since_restored(rt: Any, name: str) -> bool:
    """A checkpoint of `name` completed after its last restore (or it finished)."""
    info = rt.describe(name, refresh=True)
    restored = max(t["at"] for t in info["history"]
                   if str(t["reason"]).startswith("restored from checkpoint"))
    return info["state"] == FINISHED or (info["checkpoints"]["last_at"] or 0.0) > restored


def recovering_windows(rt: Any, name: str) -> list[tuple[float, float | None, str]]:
    """(entered, left or None, reason) of every `recovering` span in the history."""
    h = history(rt, name)
    out = []
    for i, t in enumerate(h):
        if t["state"] == RECOVERING:
            out.append((t["at"], h[i + 1]["at"] if i + 1 < len(h) else None, str(t["reason"])))
    return out


def status(rt: Any, name: str, since: float = 0.0) -> dict[str, Any]:
    """For failure messages: state, history since `since` and checkpoints of `name`."""
    info = rt.describe(name, refresh=True)
    return {"state": info["state"], "recoveries": info["recoveries"],
            "history": [(t["state"], round(t["at"] - since, 2), str(t["reason"])[:80])
                        for t in info["history"] if t["at"] >= since],
            "checkpoints": info["checkpoints"]}


def drain_until_finished(rt: Any, name: str, got: Rows, timeout_s: float = 60.0) -> None:
    """Read `name`'s results until it is finished (failing at once if it failed), then
    the rest."""
    def done() -> bool:
        got.extend(rt.results(name))
        state = state_of(rt, name)
        assert state not in ("failed", "cancelled"), \
            f"{name} {state}: {rt.describe(name)['cause']}"
        return state == FINISHED

    try:
        wait_for(done, f"{name} finished", timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{e}: {status(rt, name)}") from None
    got.extend(rt.results(name))


def await_restore(rt: Any, name: str, got: Rows, at: float) -> None:
    """Read results of `name` until it was restored after `at` (what it did, if not)."""
    try:
        wait_for(lambda: got.extend(rt.results(name)) or recovered_since(rt, name, at),
                 f"{name} restored", 90)
    except AssertionError as e:
        raise AssertionError(f"{e}: {status(rt, name, at)}") from None


def finish_exactly(rt: Any, flow: Dataflow, data: list[dict[str, Any]], rest: int,
                   got: Rows) -> None:
    """Push `data[rest:]`, close the dataflow, read it to its end: every result, read with
    commits across the failures, is exactly run_local's on `data`."""
    rt.push(flow.name, "s", data[rest:])
    rt.close(flow.name)
    drain_until_finished(rt, flow.name, got)
    want = expected(flow, {"s": data})
    assert canon(got) == want, diff(got, want)


class Feeder(threading.Thread):
    """Pushes a dataflow's inputs in batches from a handle of its own, never past
    `gate[0]` (a share of its events), then flushes and closes the dataflow."""

    def __init__(self, rt: Any, name: str, inputs: dict[str, Rows], gate: list[float],
                 batch: int = 500, pause_s: float = 0.03, columns: bool = False) -> None:
        super().__init__(name=f"feed-{name}", daemon=True)
        self.rt, self.df, self.inputs, self.gate = rt, name, inputs, gate
        self.columns = columns  # pushed as Arrow tables
        self.batch, self.pause_s = batch, pause_s
        self.total = max(len(v) for v in inputs.values())
        self.progress = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            h = self.rt.handle()
            for i in range(0, self.total, self.batch):
                while i / self.total > self.gate[0]:
                    time.sleep(0.01)
                for source, data in self.inputs.items():
                    part = data[i:i + self.batch]
                    h.push(self.df, source, pa.Table.from_pylist(part) if self.columns else part)
                self.progress = min(1.0, (i + self.batch) / self.total)
                time.sleep(self.pause_s)
            h.flush()
            h.close(self.df)
        except BaseException as e:  # reported by the test
            self.error = e


# -- 1. chaos ---------------------------------------------------------------------------------
def test_chaos_kills_lose_and_repeat_no_result(pools: Any) -> None:
    rt = pools["phoenix2"]
    seed = int(os.environ.get("CAMEO_CHAOS_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    print(f"chaos seed {seed} (CAMEO_CHAOS_SEED={seed} repeats this run)")
    tag = f"seed {seed}"
    flows = {
        "rc-window": (keyed_window("rc-window"), {"s": events(30_000, seed=11)}),
        "rc-join": (keyed_join("rc-join"), {"l": events(15_000, seed=12),
                                            "r": events(15_000, seed=13)}),
        "rc-filter": (a_filter("rc-filter"), {"s": events(30_000, seed=14)}),
        "rc-bystander": (a_filter("rc-bystander", tenant="bystander", predicate="level == 'WARN'"),
                         {"s": events(8_000, seed=15)}),
    }
    want = {n: expected(f, inputs) for n, (f, inputs) in flows.items()}
    for flow, _ in flows.values():
        rt.deploy(flow)
    try:
        hosts = {n: set(rt.describe(n, refresh=True)["executors"]) for n in flows}
        print("placement", hosts)
        got: dict[str, Rows] = {n: [] for n in flows}

        def read_all() -> None:
            for n in flows:
                got[n].extend(rt.results(n))

        gate = [1.0]
        points = sorted(rng.uniform(0.1, 0.8) for _ in range(3))
        gate[0] = points[0] + 0.05
        # The window and the filter are fed columns: Arrow in the ingress logs, on the
        # links and in flight at a checkpoint, replayed by a restore.
        feeders = [Feeder(rt, n, inputs, gate, columns=n in ("rc-window", "rc-filter"))
                   for n, (_, inputs) in flows.items()]
        for f in feeders:
            f.start()
        kills: list[tuple[int, float]] = []  # (executor, when)
        started = time.monotonic()
        for k, point in enumerate(points):
            def reached(point: float = point) -> bool:
                read_all()
                assert not [f.error for f in feeders if f.error], [f.error for f in feeders]
                return min(f.progress for f in feeders) >= point
            wait_for(reached, f"{tag}: feeders at {point:.2f}", 60)
            time.sleep(rng.uniform(0.0, 0.4))
            victim = rng.randrange(2)
            old_pid, at = kill_executor(rt, victim)
            kills.append((victim, at))
            print(f"kill {k + 1}: executor {victim} (pid {old_pid}) at feed {point:.2f}, "
                  f"{time.monotonic() - started:.1f} s in")
            if k + 1 < len(points):  # pushes go on during the recovery
                gate[0] = points[k + 1] + 0.05
            hit = [n for n in flows if victim in hosts[n]]

            def back(victim: int = victim, old_pid: int = old_pid, at: float = at,
                     hit: list[str] = hit) -> bool:
                read_all()
                pid = pid_of(rt, victim)
                return pid is not None and pid != old_pid and \
                    all(recovered_since(rt, n, at) for n in hit)
            try:
                wait_for(back, f"{tag}: executor {victim} restarted and {hit} restored", 60)
            except AssertionError as e:
                raise AssertionError(f"{e}; pids {[(x['executor'], x.get('pid')) for x in rt.executor_stats()]}, "
                                     f"{ {n: status(rt, n, at) for n in flows} }") from None
            print(f"  recovered {hit} after {time.time() - at:.1f} s")
            # Checkpoints go on after a restore (a few intervals): the results since become
            # readable, and the next kill does not count as a recovery in a row.
            for n in hit:
                try:
                    wait_for(lambda n=n: read_all() or checkpointed_since_restored(rt, n),
                             f"{tag}: a checkpoint of {n} after its restore", CHECKPOINT_AFTER_S)
                except AssertionError as e:
                    raise AssertionError(f"{e}: {status(rt, n, at)}") from None
            # Those not on the victim never stopped.
            for n in flows:
                if n not in hit:
                    assert all(t["state"] != RECOVERING for t in history(rt, n)
                               if t["at"] >= at), f"{tag}: {n} recovered after executor {victim}"
        # The rest, and the closes.
        gate[0] = 1.0
        for f in feeders:
            f.join(60)
            assert not f.is_alive(), f"{tag}: feeder of {f.df} stuck"
            assert f.error is None, f"{tag}: feeding {f.df}: {f.error!r}"
        for n in flows:
            drain_until_finished(rt, n, got[n])
        print(f"fed, killed 3 times and drained in {time.monotonic() - started:.1f} s")

        for n in flows:
            info = rt.describe(n, refresh=True)
            assert canon(got[n]) == want[n], f"{tag}: {n}: {diff(got[n], want[n])}"
            mine = [(v, at) for v, at in kills if v in hosts[n]]
            spans = recovering_windows(rt, n)
            assert info["recoveries"] == len(mine) == len(spans), (tag, n, kills, info["history"])
            for (v, at), (entered, left, reason) in zip(mine, spans, strict=True):
                assert entered >= at and left is not None and f"executor {v} died" in reason, \
                    (tag, n, info["history"])
            if not mine:  # never on a killed executor: never stopped
                assert [t["state"] for t in info["history"]] == ["running", "finishing", "finished"]
        assert any(rt.describe(n)["recoveries"] >= 1 for n in flows)
    finally:
        for n in flows:
            rt.cancel(n)


# -- 2. a bystander -------------------------------------------------------------------------
def test_a_bystander_keeps_producing_results_during_a_recovery(pools: Any) -> None:
    rt = pools["doomed3"]
    victim, bystander = keyed_window("rb-victim", parallelism=1), a_filter("rb-bystander", "calm")
    rt.deploy(victim)
    rt.deploy(bystander)
    try:
        v_ex = rt.describe("rb-victim", refresh=True)["executors"]
        b_ex = rt.describe("rb-bystander", refresh=True)["executors"]
        assert not set(v_ex) & set(b_ex)  # isolated: one executor each
        v_data = events(10_000, seed=21)
        b_data = events(40_000, seed=22)
        pushed = [0]  # bystander events pushed so far
        stop = threading.Event()
        errors: list[BaseException] = []

        def feed_bystander() -> None:
            try:
                h = rt.handle()
                while not stop.is_set() and pushed[0] < len(b_data):
                    h.push("rb-bystander", "s", b_data[pushed[0]:pushed[0] + 100])
                    pushed[0] += 100
                    time.sleep(0.02)
                h.flush()
                h.close("rb-bystander")
            except BaseException as e:
                errors.append(e)

        feeder = threading.Thread(target=feed_bystander, daemon=True)
        feeder.start()
        b_got: Rows = []
        reads: list[tuple[float, float, int]] = []  # (started, ended, rows) of bystander reads

        def read_bystander() -> None:
            t0 = time.time()
            rows = rt.results("rb-bystander")
            reads.append((t0, time.time(), len(rows)))
            b_got.extend(rows)

        v_got: Rows = []
        rt.push("rb-victim", "s", v_data[:5_000])
        rt.flush()

        def victim_results() -> bool:
            v_got.extend(rt.results("rb-victim"))
            return bool(v_got)
        wait_for(victim_results, "victim results")
        old_pid, at = kill_executor(rt, v_ex[0])

        # Only the controller's history is asked meanwhile: executor_stats() waits on the
        # dead executor until Ray notices its death.
        wait_for(lambda: read_bystander() or recovered_since(rt, "rb-victim", at),
                 "victim restored", 60)
        assert pid_of(rt, v_ex[0]) not in (None, old_pid)
        for _ in range(10):
            read_bystander()
            time.sleep(0.05)
        rt.push("rb-victim", "s", v_data[5_000:])
        rt.close("rb-victim")
        stop.set()
        feeder.join(60)
        assert not errors, errors
        drain_until_finished(rt, "rb-victim", v_got)
        drain_until_finished(rt, "rb-bystander", b_got)

        (entered, left, reason), = recovering_windows(rt, "rb-victim")
        assert left is not None and f"executor {v_ex[0]} died" in reason
        # The victim was out from the kill until restored: `recovering` starts only once Ray
        # reports the executor restarting (about a second after the SIGKILL) and lasts as
        # long as the restore (tens of ms), so the outage is measured from the kill.
        during = [r for r in reads if r[0] >= at and r[1] <= left and r[2] > 0]
        assert during, (f"no bystander results read while the victim was out "
                        f"({left - at:.2f} s, recovering {left - entered:.2f} s): "
                        f"{[(round(a - at, 2), round(b - at, 2), n) for a, b, n in reads]}")
        print(f"victim out {left - at:.2f} s (recovering {left - entered:.3f} s); bystander "
              f"reads with results meanwhile: {len(during)} ({sum(r[2] for r in during)} rows)")
        assert [t["state"] for t in history(rt, "rb-bystander")] == \
            ["running", "finishing", "finished"]
        assert canon(b_got) == expected(bystander, {"s": b_data[:pushed[0]]})
        assert canon(v_got) == expected(victim, {"s": v_data})
    finally:
        for n in ("rb-victim", "rb-bystander"):
            rt.cancel(n)


# -- 2b. a loss during a restore ------------------------------------------------------------
def test_an_executor_killed_while_the_other_is_restored_is_waited_for(pools: Any) -> None:
    """Both executors of a dataflow SIGKILLed back to back: whichever restart comes first
    begins a restore that meets the other executor dead, restarting or not yet linked;
    it waits for it and tries again (it failed the dataflow before). The exact order is
    Ray's; `tests/unit/test_control.py` drives each one without Ray."""
    rt = pools["phoenix2"]
    flow = keyed_window("rr-twice")
    data = events(12_000, seed=31)
    rt.deploy(flow)
    try:
        assert sorted(rt.describe("rr-twice", refresh=True)["executors"]) == [0, 1]
        got: Rows = []
        rt.push("rr-twice", "s", data[:6_000])
        rt.flush()
        wait_for(lambda: got.extend(rt.results("rr-twice")) or bool(got), "results")
        pids = [pid_of(rt, 0), pid_of(rt, 1)]
        at = time.time()
        kill_executor(rt, 0)
        os.kill(pids[1], signal.SIGKILL)

        def back() -> bool:
            got.extend(rt.results("rr-twice"))
            now = [pid_of(rt, 0), pid_of(rt, 1)]
            return None not in now and not set(now) & set(pids) and \
                recovered_since(rt, "rr-twice", at)
        try:
            wait_for(back, "both executors restarted and rr-twice restored", 90)
        except AssertionError as e:
            raise AssertionError(f"{e}: {status(rt, 'rr-twice', at)}") from None
        finish_exactly(rt, flow, data, 6_000, got)
    finally:
        rt.cancel("rr-twice")


def test_a_damaged_checkpoint_is_detected_and_the_one_before_restored(pools: Any) -> None:
    """A bit of the newest checkpoint's part flipped on disk (a bad disk), then the
    executor SIGKILLed: recovery refuses the part by its checksum, restores the checkpoint
    before, with the cause in the history, and replays the ingress log from there."""
    rt = pools["phoenix2"]
    flow = keyed_window("rr-damaged").fault_tolerance(checkpoint_interval_ms=600_000)
    data = events(9_000, seed=37)
    rt.deploy(flow)
    try:
        got: Rows = []
        for part in (data[:3_000], data[3_000:6_000]):  # a checkpoint after each
            rt.push("rr-damaged", "s", part)
            rt.wait_idle()
            got.extend(rt.results("rr-damaged"))
        rt.push("rr-damaged", "s", data[6_000:7_500])
        rt.flush()
        info = rt.describe("rr-damaged", refresh=True)
        storage = CheckpointStorage(os.path.join(pools.storage, "checkpoints", "phoenix2"))
        kept = storage.checkpoints("rr-damaged", info["deployment"])
        newest = storage.manifest("rr-damaged", info["deployment"], kept[-1])
        assert len(kept) == 2 and newest is not None, kept
        win1 = next(a for a in newest["parts"] if "/window" in a and a.endswith("/1"))
        host = rt.describe("rr-damaged", refresh=True)["hosts"][win1]
        # One bit gone bad on disk, in the part and in the executor's local copy of it.
        for path in (os.path.join(storage.url, newest["parts"][win1]),
                     local_copy(pools, host, newest["parts"][win1])):
            with open(path, "r+b") as f:
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([last[0] ^ 1]))
        _, at = kill_executor(rt, host)
        await_restore(rt, "rr-damaged", got, at)
        reason = str(history(rt, "rr-damaged")[-1]["reason"])
        assert reason.startswith(f"restored from checkpoint {kept[0]} (skipped: checkpoint "
                                 f"{kept[1]} is damaged") and "crc32" in reason, reason
        finish_exactly(rt, flow, data, 7_500, got)
    finally:
        rt.cancel("rr-damaged")


def local_copy(pools: Any, executor: int, part: str) -> str:
    """Where an executor of phoenix2 keeps its local copy of a checkpoint part."""
    return os.path.join(pools.storage, "local", "phoenix2", f"executor-{executor}", part)


def test_a_restarted_executor_restores_from_its_local_copies(pools: Any) -> None:
    """The killed executor's parts of the newest checkpoint are gone from the checkpoint
    storage (as if it were remote and unreachable): it is restarted on the same node and
    restores them from its local copies, from that checkpoint, results exact."""
    rt = pools["phoenix2"]
    flow = keyed_window("rr-local").fault_tolerance(checkpoint_interval_ms=600_000)
    data = events(6_000, seed=41)
    rt.deploy(flow)
    try:
        got: Rows = []
        rt.push("rr-local", "s", data[:3_000])
        rt.wait_idle()  # a checkpoint: every result readable
        got.extend(rt.results("rr-local"))
        rt.push("rr-local", "s", data[3_000:4_500])
        rt.flush()
        info = rt.describe("rr-local", refresh=True)
        storage = CheckpointStorage(os.path.join(pools.storage, "checkpoints", "phoenix2"))
        newest = storage.latest("rr-local", info["deployment"])
        assert newest is not None
        host = info["hosts"][next(a for a in newest["parts"] if "/window" in a)]
        mine = [p for a, p in newest["parts"].items() if info["hosts"][a] == host]
        assert all(os.path.exists(local_copy(pools, host, p)) for p in mine)
        for p in mine:
            os.remove(os.path.join(storage.url, p))
        _, at = kill_executor(rt, host)
        await_restore(rt, "rr-local", got, at)
        restore = rt.describe("rr-local", refresh=True)["checkpoints"]["last_restore"]
        assert restore is not None and restore["checkpoint"] == newest["checkpoint"]
        assert restore["read_local_bytes"] >= sum(
            os.path.getsize(local_copy(pools, host, p)) - 8 for p in mine)  # less the header
        finish_exactly(rt, flow, data, 4_500, got)
    finally:
        rt.cancel("rr-local")


# -- 3. no checkpoints ------------------------------------------------------------------------
def test_a_dataflow_without_checkpoints_fails_with_its_executor(pools: Any) -> None:
    rt = pools["doomed3"]
    rt.deploy(errors_only("rn-fragile").fault_tolerance(checkpoint_interval_ms=0))
    rt.deploy(errors_only("rn-other"))
    try:
        f_ex = rt.describe("rn-fragile", refresh=True)["executors"]
        o_ex = rt.describe("rn-other", refresh=True)["executors"]
        assert not set(f_ex) & set(o_ex)
        assert rt.describe("rn-fragile")["checkpoints"]["interval_s"] == 0
        rt.push("rn-fragile", "logs", log_events(50))
        rt.push("rn-other", "logs", log_events(50))
        rt.flush()
        old_pid, _ = kill_executor(rt, f_ex[0])
        wait_for(lambda: state_of(rt, "rn-fragile") == "failed", "fragile failed", 60)
        info = rt.describe("rn-fragile", refresh=True)
        assert info["lost"] and info["released"] and info["recoveries"] == 0
        assert f"executor {f_ex[0]} died" in info["cause"] and "no checkpoint" in info["cause"], \
            info["cause"]
        # The executor came back (empty) for new work.
        wait_for(lambda: pid_of(rt, f_ex[0]) not in (None, old_pid), "executor restarted", 60)
        # The other one noticed nothing: its results are run_local's.
        more = log_events(200, start=50)
        rt.push("rn-other", "logs", more)
        rt.wait_idle()
        assert [t["state"] for t in history(rt, "rn-other")] == ["running"]
        want = run_local(errors_only("rn-other"), {"logs": log_events(50) + more})["out"]
        assert sorted(e["ts"] for e in rt.results("rn-other")) == sorted(e["ts"] for e in want)
    finally:
        for n in ("rn-fragile", "rn-other"):
            rt.cancel(n)


# -- 4. the controller killed ---------------------------------------------------------------
def test_the_controller_killed_is_restarted_and_dataflows_go_on(ray_session: None,
                                                               tmp_path: Any) -> None:
    import ray

    from cameo_actors.runtime import Runtime, RuntimeConfig
    from cameo_actors.runtime.exceptions import RuntimeUnavailable

    # Storage of its own: a registry left by an earlier run must not be resumed here.
    rt = Runtime.start(RuntimeConfig(num_executors=2, checkpoint_interval_s=0.5,
                                     monitor_interval_s=0.2,
                                     checkpoint_url=str(tmp_path / "checkpoints"),
                                     ingress_log_dir=str(tmp_path / "ingress")),
                       pool="test-lazarus")
    try:
        flow = keyed_window("rl-window")
        data = events(20_000, seed=31)
        rt.deploy(flow)
        got: Rows = []
        rt.push("rl-window", "s", data[:10_000], batch_size=500)
        rt.flush()
        got += rt.results("rl-window")
        ray.kill(rt.controller, no_restart=False)
        unavailable: list[str] = []

        def answers() -> bool:
            try:
                return rt.describe("rl-window", refresh=True)["state"] == RUNNING
            except RuntimeUnavailable as e:
                unavailable.append(str(e))
                return False
        wait_for(answers, "the restarted controller answers", 30)
        if unavailable:
            print(f"RuntimeUnavailable right after the controller was killed: {unavailable[:2]}")
        rt.push("rl-window", "s", data[10_000:], batch_size=500)
        rt.close("rl-window")
        drain_until_finished(rt, "rl-window", got)
        want = expected(flow, {"s": data})
        assert canon(got) == want, diff(got, want)
        info = rt.describe("rl-window", refresh=True)
        assert info["recoveries"] == 0  # the executors were adopted: nothing to restore
        assert [t["state"] for t in info["history"]] == ["running", "finishing", "finished"]
        assert [d["state"] for d in rt.list() if d["name"] == "rl-window"] == [FINISHED]
    finally:
        rt.shutdown(stop_ray=False)
