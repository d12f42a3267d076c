"""Per-message cost of the scheduling layer, for 1, 100 and 10,000 activations.

Run: `python -m bench.sched_overhead [--messages N] [--policy NAME] [--json FILE]`

Each size is measured without and with tenant floors (8 tenants), side by side.

Measured with the OS clock (this is a benchmark, not a unit test):
- build:    creating the Message + PriorityContext at ingress (the runtime does this);
- enqueue:  stamping (frontier, deadline, key) + mailbox put + run-queue re-key;
- dispatch: run_once with a no-op execute: run-queue pop, mailbox pop, hooks
            (cost learning), clock reads, preemption checks, re-queue;
- steady:   enqueue and dispatch interleaved (a backlog of ~4 per activation).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from bench.harness.output import save_json
from cameo_actors.scheduling import Message, Scheduler, WindowTiming


class _PerfClock:
    """A monotonic ms clock for the benchmark (logic code gets its clock injected)."""

    def now_ms(self) -> float:
        return time.perf_counter() * 1000.0


def _build(n_acts: int, policy: str, floor_slack_ms: float | None) -> tuple[Scheduler, list[str]]:
    s = Scheduler(policy, quantum_ms=1.0, floor_slack_ms=floor_slack_ms)
    ids = []
    for i in range(n_acts):
        aid = f"df{i % 64}/op#{i}"
        window = WindowTiming.tumbling(1000.0) if i % 4 == 3 else None
        s.add_activation(
            aid,
            dataflow=f"df{i % 64}",
            tenant=f"t{i % 8}",
            latency_target_ms=50.0 if i % 2 else 1000.0,
            weight=1.0 + i % 3,
            window=window,
        )
        ids.append(aid)
    return s, ids


def _messages(ids: list[str], n: int, rng: random.Random, t0: float) -> list[Message]:
    out = []
    payload = [{"v": 1}]
    for j in range(n):
        t = t0 + j * 0.01
        out.append(
            Message.ingress(
                rng.choice(ids),
                payload,
                dataflow="df0",
                tenant="t0",
                ingest_ms=t,
                event_ms=t - 20.0,
            )
        )
    return out


def measure(n_acts: int, n_msgs: int, policy: str, floor_slack_ms: float | None = None
            ) -> dict[str, float]:
    """µs per message for each phase (see module docstring)."""
    rng = random.Random(7)
    clock = _PerfClock()
    s, ids = _build(n_acts, policy, floor_slack_ms)
    # dataflow ids must match the target's dataflow for lag sharing: fix them up
    flow_of = {aid: s.profile(aid).dataflow for aid in ids}

    t = time.perf_counter()
    msgs = _messages(ids, n_msgs, rng, 1e12)
    build = time.perf_counter() - t
    for m in msgs:
        m.ctx.dataflow = flow_of[m.target]

    t = time.perf_counter()
    enq = s.enqueue
    now = 1e12
    for m in msgs:
        enq(m, now)
    enqueue = time.perf_counter() - t

    def noop(aid: str, msg: Message) -> None:
        return None

    t = time.perf_counter()
    s.run_until_idle(noop, clock)
    dispatch = time.perf_counter() - t
    if s.backlog:
        raise RuntimeError("benchmark did not drain")

    # Steady state: keep ~4 messages per activation waiting, interleave.
    msgs = _messages(ids, n_msgs + 4 * n_acts, rng, 2e12)
    for m in msgs:
        m.ctx.dataflow = flow_of[m.target]
    for m in msgs[: 4 * n_acts]:
        enq(m, 2e12)
    rest = msgs[4 * n_acts :]
    run_once = s.run_once
    t = time.perf_counter()
    done = s.stats.executed
    i = 0
    while i < len(rest):
        for m in rest[i : i + 8]:
            enq(m, 2e12)
        i += 8
        run_once(noop, clock)
    steady_msgs = len(rest) + (s.stats.executed - done)  # enqueued + dispatched
    steady = time.perf_counter() - t
    return {
        "build": 1e6 * build / n_msgs,
        "enqueue": 1e6 * enqueue / n_msgs,
        "dispatch": 1e6 * dispatch / n_msgs,
        "steady": 1e6 * steady / (steady_msgs / 2),
        "overhead_stat": s.stats.overhead_us_per_message,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="messages per run")
    ap.add_argument("--policy", default="cameo", help="policy name (default cameo)")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    runs: list[dict[str, Any]] = []
    print(f"policy={args.policy} messages={args.messages}  (µs per message)")
    print(
        f"{'activations':>11} {'floors':>6} {'build':>7} {'enqueue':>8} {'dispatch':>9} "
        f"{'enq+disp':>9} {'steady':>7} {'on/off':>6}"
    )
    for n in (1, 100, 10_000):
        off = None
        for slack in (None, 50.0):
            r = measure(n, args.messages, args.policy, slack)
            total = r["enqueue"] + r["dispatch"]
            ratio = "" if off is None else f"{total / off:6.2f}"
            print(
                f"{n:>11} {'on' if slack else 'off':>6} {r['build']:>7.2f} {r['enqueue']:>8.2f} "
                f"{r['dispatch']:>9.2f} {total:>9.2f} {r['steady']:>7.2f} {ratio:>6}"
            )
            off = total
            runs.append({"activations": n, "floors": bool(slack), **r, "enq_disp": total})
    figures = {"policy": args.policy, "messages": args.messages, "runs": runs}
    save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
