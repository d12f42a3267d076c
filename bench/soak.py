"""A soak: many tenants for a long time with everything on, watching for growth.

Run: `python -m bench.soak [--minutes 30] [--dataflows 50] [--rate 40] [--chaos-every 120]
      [--victim 0] [--json FILE] [--plot FILE]`

One pool of two executors on a private Ray, with the defaults users run (checkpoints
every 2 s, exactly-once results, tracing, tenant floors) and the scaling loop on (ds2,
at most 3 executors). `--dataflows` dataflows, one tenant each, of four kinds in turn:
a filter ("filter"), a keyed tumbling window of 1 s ("window", parallelism 2), and
Nexmark q1 and q5 (parallelism 1). Each gets `--rate` events/s, pushed every 0.5 s by
one feeder thread; one reader thread reads and commits every dataflow's results.

Every `--chaos-every` seconds, in turn: a window dataflow's window is scaled between 2
and 3 instances (a live migration), and an executor is killed (SIGKILL; Ray restarts it
and its dataflows are restored from their checkpoints): always the same one (`--victim`),
so that the others run the whole soak and their memory shows any growth.

Every 10 s it samples: each process's memory (RSS of the driver, the controller, each
executor, and Ray's GCS and raylet), CPU time and open files; the checkpoint storage
and ingress logs on disk (bytes and files); the unread results (`state_bytes` of every
dataflow, summed); and the executors' busy share. The feeder pushes what is due by the
clock; the rate it reached is reported beside the cores each process used (on a small
machine the feeder and the controller take a large share). At the end every dataflow
is closed, and the results of every fifth one are checked against `run_local` on the
same events. Reported: per tenant, the share of results within its latency target,
outside the 20 s after each failure; each sampled figure at the end of the first fifth
of the run, at its middle and at its end (growth that levels off is mostly in the
first half); the plot.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from bench.harness.cluster import ensure_ray, process_cpu_s, process_memory_mb
from bench.harness.output import save_json
from bench.harness.plots import pyplot
from cameo_actors import Dataflow, count, run_local
from cameo_actors.nexmark import queries
from cameo_actors.nexmark.generator import NexmarkConfig, in_time_order
from cameo_actors.runtime import Runtime, RuntimeConfig
from cameo_actors.service.testing import processes_under

KINDS = ("filter", "window", "nexmark-q1", "nexmark-q5")
SCHEMA = {"ts": "int", "key": "str", "value": "float"}
SAMPLE_S = 10.0
PUSH_EVERY_S = 0.5
#: After a failure, the seconds whose results do not count for the within-target share.
AFTER_FAILURE_S = 20.0
#: Every this many dataflows, one is checked against run_local.
CHECK_EVERY = 5


def dataflow(i: int) -> Dataflow:
    kind, name = KINDS[i % len(KINDS)], f"soak-{i:02d}"
    tenant = f"tenant-{i:02d}"
    if kind == "filter":
        return (Dataflow(name, latency_target_ms=200, tenant=tenant)
                .source("s", schema=SCHEMA, event_time="ts").filter("value >= 500").sink("o"))
    if kind == "window":
        return (Dataflow(name, latency_target_ms=2_000, tenant=tenant)
                .source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=0)
                .key_by("key").window(tumbling_ms=1_000, parallelism=2, id="win")
                .aggregate(n=count()).sink("o"))
    d = (queries.q1 if kind == "nexmark-q1" else queries.q5)(name=name)
    d.tenant = tenant
    return d


def source(i: int) -> str:
    return queries.SOURCE if KINDS[i % len(KINDS)].startswith("nexmark") else "s"


def sink(i: int) -> str:
    return queries.SINK if KINDS[i % len(KINDS)].startswith("nexmark") else "o"


def events(i: int, rate: float) -> Iterator[dict[str, Any]]:
    """Dataflow i's events, the same on every call: event time advances as the feed does
    (`rate` per second of event time), in order."""
    kind = KINDS[i % len(KINDS)]
    if kind.startswith("nexmark"):
        return in_time_order(NexmarkConfig(events=10**9, seed=i, rate_eps=rate))
    step = 1000.0 / rate
    return ({"ts": int(n * step), "key": f"k{n % 13}", "value": float((n * 7919) % 1000)}
            for n in itertools.count())


class Feeder(threading.Thread):
    """Pushes each dataflow its share of events every PUSH_EVERY_S, from its own handle."""

    def __init__(self, rt: Runtime, names: list[str], rate: float) -> None:
        super().__init__(daemon=True, name="soak-feeder")
        self.rt, self.names, self.rate = rt.handle(), names, rate
        self.feeds = {n: events(i, rate) for i, n in enumerate(names)}
        self.sources = {n: source(i) for i, n in enumerate(names)}
        self.pushed = Counter[str]()
        self.stopped = threading.Event()
        self.failures: list[str] = []
        self.started = time.monotonic()

    def run(self) -> None:
        self.started = time.monotonic()
        while not self.stopped.wait(PUSH_EVERY_S):
            # What is due by now, not a fixed batch per turn: a turn that takes long
            # (a push waiting on backpressure, a restore) is made up in the next.
            due = int(self.rate * (time.monotonic() - self.started))
            for name in self.names:
                batch = list(itertools.islice(self.feeds[name], max(0, due - self.pushed[name])))
                try:
                    self.rt.push(name, self.sources[name], batch)
                    self.pushed[name] += len(batch)
                except Exception as e:  # noqa: BLE001 - counted, and the soak goes on
                    self.failures.append(f"{name}: {type(e).__name__}: {e}"[:300])
            try:
                self.rt.flush()
            except Exception as e:  # noqa: BLE001
                self.failures.append(f"flush: {type(e).__name__}: {e}"[:300])


def _digest(row: dict[str, Any]) -> bytes:
    """16 bytes that stand for a result row (its fields in order): a soak at a high rate
    keeps millions of results to check, not as dicts."""
    return hashlib.blake2b(repr(sorted(row.items())).encode(), digest_size=16).digest()


class Reader(threading.Thread):
    """Reads and commits every dataflow's results; per dataflow, latencies in 10 s buckets
    (results within target, results), and the rows of those checked against run_local
    (as digests)."""

    def __init__(self, rt: Runtime, flows: dict[str, Dataflow], checked: set[str]) -> None:
        super().__init__(daemon=True, name="soak-reader")
        self.rt, self.flows, self.checked = rt.handle(), flows, checked
        self.buckets: dict[str, Counter[tuple[int, bool]]] = {n: Counter() for n in flows}
        #: per checked dataflow, its results as digests (`_digest`), counted
        self.rows: dict[str, Counter[bytes]] = {n: Counter() for n in checked}
        self.stopped = threading.Event()
        self.failures: list[str] = []

    def read_all(self) -> None:
        for name, flow in self.flows.items():
            try:
                rows = self.rt.result_rows(name)
            except Exception as e:  # noqa: BLE001 - counted, and the soak goes on
                self.failures.append(f"{name}: {type(e).__name__}: {e}"[:300])
                continue
            target = flow.spec.latency_target_ms
            for _, ingest_ms, egress_ms in rows:
                self.buckets[name][(int(egress_ms / 1000 // SAMPLE_S), egress_ms - ingest_ms
                                    <= target)] += 1
            if name in self.checked:
                self.rows[name].update(_digest(e) for e, _, _ in rows)

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.read_all()


def _du(folder: str) -> tuple[int, int]:
    """(bytes, files) under `folder`."""
    size = files = 0
    for root, _, names in os.walk(folder):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return size, files


def _controller_pid(rt: Runtime) -> int | None:
    """The pool's controller's process id (it may have been restarted)."""
    import ray

    try:
        return int(ray.get(rt.controller.__ray_call__.remote(lambda _: os.getpid()), timeout=10))
    except Exception:  # noqa: BLE001 - not answering now: not sampled this time
        return None


def _ray_pids() -> dict[str, int]:
    """Ray's own processes of the Ray this soak started (its GCS and raylet): they keep
    what the pool's calls and restarts leave behind (task events, actor records)."""
    found = {}
    for pid, (_, command) in processes_under(os.getpid()).items():
        program = os.path.basename(command.split(" ", 1)[0])
        if program in ("gcs_server", "raylet"):
            found[f"ray-{program}"] = pid
    return found


def _open_files(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def sample(rt: Runtime, names: list[str], folders: dict[str, str], t0: float) -> dict[str, Any]:
    stats = rt.executor_stats()
    pids = {"driver": os.getpid(), "controller": _controller_pid(rt),
            **{f"executor-{e['executor']}": e.get("pid") for e in stats}, **_ray_pids()}
    unread = 0
    for name in names:
        with contextlib.suppress(Exception):  # ended meanwhile
            unread += int(rt.describe(name, refresh=True).get("state_bytes") or 0)
    out: dict[str, Any] = {
        "t_s": round(time.monotonic() - t0, 1),
        "rss_mb": {k: process_memory_mb(p, "VmRSS") for k, p in pids.items() if p},
        "open_files": {k: _open_files(p) for k, p in pids.items() if p},
        "cpu_s": {k: process_cpu_s(p) for k, p in pids.items() if p},
        "state_bytes": unread,
        "busy_ms": {str(e["executor"]): e.get("busy_ms", 0.0) for e in stats if "busy_ms" in e},
        "executors": len([e for e in stats if e.get("alive", True)]),
    }
    for what, folder in folders.items():
        out[f"{what}_bytes"], out[f"{what}_files"] = _du(folder)
    return out


def _busy_s(samples: list[dict[str, Any]]) -> float:
    """The executors' busy seconds over the samples (an executor restarted counts from 0)."""
    total = 0.0
    for before, after in itertools.pairwise(samples):
        for ex, ms in after["busy_ms"].items():
            was = before["busy_ms"].get(ex, 0.0)
            total += (ms - was if ms >= was else ms) / 1000
    return total


def _cpu_shares(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Each process's share of a core over the samples (a restarted one counts from 0),
    and the machine's cores used by them all ("all")."""
    span = samples[-1]["t_s"] - samples[0]["t_s"] if len(samples) > 1 else 0.0
    total: Counter[str] = Counter()
    for before, after in itertools.pairwise(samples):
        for proc, s in after["cpu_s"].items():
            was = before["cpu_s"].get(proc) or 0.0
            if s is not None:
                total[proc] += s - was if s >= was else s
    shares = {proc: round(s / span, 3) for proc, s in total.items()} if span else {}
    return {**shares, "all": round(sum(shares.values()), 3)}


def _growth(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure at the end of the first fifth of the run, at its middle, at its end,
    and its largest."""
    if len(samples) < 2:
        return {}
    first, mid = samples[len(samples) // 5], samples[len(samples) // 2]
    out: dict[str, Any] = {}
    for key in ("state_bytes", "checkpoints_bytes", "checkpoints_files", "ingress_bytes",
                "ingress_files"):
        out[key] = {"from": first[key], "mid": mid[key], "to": samples[-1][key],
                    "max": max(s[key] for s in samples)}
    for key in ("rss_mb", "open_files"):
        for proc in samples[-1][key]:
            values = [s[key].get(proc) for s in samples if s[key].get(proc) is not None]
            if values:
                out[f"{key}:{proc}"] = {"from": first[key].get(proc), "mid": mid[key].get(proc),
                                        "to": values[-1], "max": max(values)}
    return out


def plot(samples: list[dict[str, Any]], chaos: list[tuple[float, str]], path: str) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    t = [s["t_s"] / 60 for s in samples]
    for proc in samples[-1]["rss_mb"]:
        axes[0].plot(t, [s["rss_mb"].get(proc) for s in samples], label=proc)
    axes[0].set_ylabel("RSS (MB)")
    axes[0].legend(fontsize=7)
    for key, label in (("checkpoints_bytes", "checkpoints"), ("ingress_bytes", "ingress logs"),
                       ("state_bytes", "unread results")):
        axes[1].plot(t, [s[key] / 1e6 for s in samples], label=label)
    axes[1].set_ylabel("MB")
    axes[1].legend(fontsize=7)
    for proc in samples[-1]["open_files"]:
        axes[2].plot(t, [s["open_files"].get(proc) for s in samples], label=proc)
    axes[2].set_ylabel("open files")
    axes[2].set_xlabel("minutes")
    for ax in axes:
        for at, _ in chaos:
            ax.axvline(at / 60, color="grey", lw=0.5, ls=":")
    fig.suptitle("bench.soak: growth over time (dotted: a migration or a kill)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run(minutes: float, n: int, rate: float, chaos_every: float, run_dir: str,
        victim: int = 0) -> dict[str, Any]:
    shutil.rmtree(run_dir, ignore_errors=True)
    folders = {"checkpoints": os.path.join(run_dir, "checkpoints"),
               "ingress": os.path.join(run_dir, "ingress")}
    config = RuntimeConfig(
        num_executors=2, monitor_interval_s=0.5, checkpoint_url=folders["checkpoints"],
        ingress_log_dir=folders["ingress"],
        scaling={"policy": "ds2", "max_executors": 3, "max_parallelism": 3})
    rt = Runtime.start(config, pool="soak", run_dir=run_dir)
    flows = {d.name: d for d in (dataflow(i) for i in range(n))}
    names = list(flows)
    checked = set(names[::CHECK_EVERY])
    for flow in flows.values():
        rt.deploy(flow)
    feeder, reader = Feeder(rt, names, rate), Reader(rt, flows, checked)
    t0, t0_wall = time.monotonic(), time.time()
    feeder.start()
    reader.start()
    samples: list[dict[str, Any]] = []
    chaos: list[tuple[float, str]] = []
    windows = [name for i, name in enumerate(names) if KINDS[i % len(KINDS)] == "window"]
    next_sample, next_chaos, turn = t0, t0 + chaos_every, 0
    try:
        while (now := time.monotonic()) < t0 + minutes * 60:
            if now >= next_sample:
                samples.append(sample(rt, names, folders, t0))
                next_sample += SAMPLE_S
                s = samples[-1]
                print(f"{s['t_s'] / 60:5.1f} min: RSS {sum(v or 0 for v in s['rss_mb'].values()):,.0f} MB, "
                      f"checkpoints {s['checkpoints_bytes'] / 1e6:,.1f} MB, ingress "
                      f"{s['ingress_bytes'] / 1e6:,.1f} MB, unread {s['state_bytes'] / 1e6:,.1f} MB, "
                      f"{s['executors']} executors", flush=True)
            if now >= next_chaos and windows:
                what = _chaos(rt, turn, windows, victim)
                chaos.append((round(now - t0, 1), what))
                print(f"  {what}", flush=True)
                turn += 1
                next_chaos += chaos_every
            time.sleep(0.2)
    finally:
        feeder.stopped.set()
        feeder.join(60)
    fed_s = time.monotonic() - feeder.started
    for name in names:
        rt.close(name)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and any(
            rt.describe(nm, refresh=True)["state"] not in ("finished", "failed") for nm in names):
        time.sleep(1.0)
    reader.stopped.set()
    reader.join(60)
    reader.read_all()
    busy_s = _busy_s(samples)
    span_s = samples[-1]["t_s"] - samples[0]["t_s"] if len(samples) > 1 else 1.0
    exact = {}
    for name in sorted(checked):
        i = names.index(name)
        pushed = feeder.pushed[name]
        want = run_local(flows[name], {source(i): list(itertools.islice(events(i, rate), pushed))})
        exact[name] = reader.rows[name] == Counter(map(_digest, want[sink(i)]))
    failures = [t0_wall + t for t, what in chaos if what.startswith("killed")]

    def counted(bucket: int) -> bool:  # its results came in no failure's first seconds
        start = bucket * SAMPLE_S
        return not any(f <= start + SAMPLE_S and start < f + AFTER_FAILURE_S for f in failures)

    within: dict[str, float | None] = {}
    for name, buckets in reader.buckets.items():
        ok = sum(c for (b, good), c in buckets.items() if good and counted(b))
        total = sum(c for (b, _), c in buckets.items() if counted(b))
        within[name] = round(ok / total, 4) if total else None
    states = Counter(rt.describe(nm)["state"] for nm in names)
    rt.shutdown()
    return {"minutes": minutes, "dataflows": n, "rate_eps": rate, "chaos_every_s": chaos_every,
            "victim": victim, "offered_eps": round(rate * n),
            "pushed_eps": round(sum(feeder.pushed.values()) / fed_s),
            "executors_busy_share": round(busy_s / span_s / max(1.0, sum(
                s["executors"] for s in samples) / len(samples)), 3),
            "cpu_cores": _cpu_shares(samples), "cores": os.cpu_count(),
            "chaos": chaos, "states": dict(states), "results_exact": exact,
            "within_target": within, "growth": _growth(samples), "samples": samples,
            "feeder_failures": feeder.failures[:20], "reader_failures": reader.failures[:20]}


def _chaos(rt: Runtime, turn: int, windows: list[str], victim: int) -> str:
    """A live migration (even turns) or executor `victim` killed (odd turns)."""
    if turn % 2 == 0:
        name = windows[(turn // 2) % len(windows)]
        to = 3 if turn // 2 % 2 == 0 else 2
        try:
            rt.scale(name, "win", to)
            return f"scaled {name}'s window to {to}"
        except Exception as e:  # noqa: BLE001 - a conflict with the scaling loop, say
            return f"scale of {name} refused: {type(e).__name__}"
    pid = next((e.get("pid") for e in rt.executor_stats() if e["executor"] == victim), None)
    if not pid:
        return f"no kill: executor {victim} is not running now"
    os.kill(int(pid), signal.SIGKILL)
    return f"killed executor {victim} (pid {pid})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--dataflows", type=int, default=50)
    parser.add_argument("--rate", type=float, default=40.0, help="events/s per dataflow")
    parser.add_argument("--chaos-every", type=float, default=120.0,
                        help="seconds between a migration and an executor kill, in turn")
    parser.add_argument("--victim", type=int, default=0,
                        help="the executor killed every other --chaos-every (always the same)")
    parser.add_argument("--run-dir", default=os.path.join(".run", "soak"))
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plot", help="write the growth plot (PNG) to this file")
    args = parser.parse_args(argv)
    started = ensure_ray()
    try:
        res = run(args.minutes, args.dataflows, args.rate, args.chaos_every,
                  os.path.abspath(args.run_dir), args.victim)
    finally:
        if started:
            import ray

            ray.shutdown()
    save_json(args.json, res)
    if args.plot and res["samples"]:
        plot(res["samples"], res["chaos"], args.plot)
    shares = [v for v in res["within_target"].values() if v is not None]
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in res["cpu_cores"].items())
    print(f"offered {res['offered_eps']:,} events/s, pushed {res['pushed_eps']:,}/s; cores used "
          f"(of {res['cores']}): {cpu}")
    print(f"states {res['states']}; executors {res['executors_busy_share']:.1%} busy; "
          f"within target (outside {AFTER_FAILURE_S:g} s after a kill): "
          f"min {min(shares, default=0):.1%}, median {sorted(shares)[len(shares) // 2] if shares else 0:.1%}; "
          f"results exact: {sum(res['results_exact'].values())}/{len(res['results_exact'])}")
    for key, g in res["growth"].items():
        print(f"  {key}: {g['from']} -> {g['mid']} -> {g['to']} (max {g['max']})")
    return res


if __name__ == "__main__":
    main()
