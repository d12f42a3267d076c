"""Cameo scenarios, each under fifo, cameo and isolated, in one run on one Ray.

Run: `python -m bench.cameo --scenario {single,multi,spike,fair,overload,mix,random,skew,all}
      [--duration S] [--quick] [--repeat N] [--mixes N] [--checkpoints {on,off,both}]
      [--input {rows,arrow,both}] [--push {whole,spread}] [--json FILE] [--plots DIR]`

- single: bulk alone (source -> burn map -> key_by -> 250 ms tumbling count,
  parallelism 2, target 1 s) at 85% of the pool's calibrated capacity.
- multi: bench/multitenant.py's setup (bench/harness/tenants.py): alerts (50 ms, 1,000 ev/s) + bulk
  (1 s windows) at 85%.
- spike: alerts + bulk at 60%, bulk offered 4x for 1 s every 6 s; p99 of
  alerts per second.
- fair: three bulk tenants a, b, c (weights 1, 1, 2) started 3 s apart, each
  offered 100% of capacity; fifo vs fair_share (the "cameo" slot), executor time per
  tenant per second and final shares.
- mix: a filter, a projection and a keyed window (targets 50, 100 and 300 ms, 500 ev/s
  each) beside two bulk tenants of equal weight and equal rate (targets 1 s and 4 s), at
  95% of the pool's capacity for this mix (`scenarios.sustainable`: the highest bulk rate
  it keeps up with beside the others, found first by bisection); per tenant its share
  within target and its share of executor time against its weighted fair share.
- random: mixes drawn at random from seeds (`bench/mixes.py`: kinds, targets, weights,
  rates, a load of 70-95%), each run as mix is; the worst tenant of any of them.
- skew: the Cameo paper's single-tenant shape: a keyed window (250 ms) fed by four sources,
  offered 30%, 45% and 55% of capacity, at each first with their event times together,
  then each 250 ms behind the one before.
  ("all" runs single, multi, spike, fair and overload: mix, random and skew each have a
  JSON of their own.)
- overload: three latency-sensitive tenants (targets 20, 50, 150 ms, 500 ev/s each) and two
  bulk tenants (targets 1 s and 3 s, weights 1 and 2) offered together 90%, 120% and 150%
  of capacity (quick: 90% and 150%); per tenant its share of executor time against its
  weighted max-min fair share, within_target and throughput.

Modes: fifo, cameo (deadline order alone) and floor (deadline order within each tenant's
guaranteed floor, the default) share two executors; isolated gives each dataflow its own
(same total). Capacity is measured once, at the start: the executors' busy time per
bulk event at a low rate, then bulk offered 1.5x that, and what it took in
(`tenants.measure_capacity`): the rate the pool sustains flat out, and its executors' busy
share then. The load a run reached is its executors' busy share over that one. Single and multi
first run their mix alone at two lower rates and offer the rate that the line through the
loads reached predicts for theirs (`scenarios.tuned`): offered 85% of the capacity bulk
alone reaches, the pool ran them at 86-99% of flat out.
Every scenario states its load and checks it in every shared mode (`scenarios.off_load`):
single and multi 85%, spike its mean offered (at most 100%), reached within 15 points;
fair and overload at or over capacity, reached at least 85%. A run off its load reports no
ratio and says why.
Each run of a scenario starts from another mode (`scenarios.rotated`): none always runs
after the same others.
Ratios: p99 of the latency-sensitive dataflows (max over them), fifo / cameo,
floor / cameo and isolated / cameo. Inputs come from bench/harness/workload.py, seeded.

Checkpoints are on as users run them (the pool's default: every 2 s, exactly-once
results, incremental parts); `--checkpoints off` turns them off in every pool, and
`--checkpoints both` runs each scenario with them and then without, in turn, and prints
the ratios and the executors' busy share of both side by side (results["checkpoints_off"]).
`--input arrow` has the feeders push the same events as Arrow tables (run as columns
where a step has a kernel), and `--input both` runs each scenario with rows and then with
Arrow, at the same offered load (results["arrow_input"]).
A feeder sends each batch (every 100 ms for bulk) as one call, to one source instance in
turn; `--push spread` sends a call to each instance instead. (Whole batches leave one
executor a batch's map work every other period; fifo then queues the other work behind
it, which is where deadline order gains in single.)
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from bench import mixes as bench_mixes
from bench import scenarios
from bench.harness.cluster import ensure_ray
from bench.harness.output import save_json
from bench.harness.runner import FEED
from bench.harness.tenants import CONFIG, Capacity, measure_capacity

SCENARIOS = ("single", "multi", "spike", "fair", "overload", "mix", "random", "skew")
#: The random mixes' seeds: `--mixes N` draws the first N (quick: 2).
RANDOM_SEEDS = (11, 12, 13, 14, 15, 16)


def run_scenario(name: str, capacity: Capacity, warmup: float, seconds: float, quick: bool,
                 log: Any = print, turn: int = 0, mixes: int = len(RANDOM_SEEDS)) -> dict[str, Any]:
    """One run of scenario `name`; `turn`: its modes start from the turn-th
    (`scenarios.rotated`), so that repeated runs order them differently."""
    cap, kw = capacity.eps, dict(log=log, turn=turn, flat_out=capacity.busy)
    if name == "single":
        return scenarios.single(cap, warmup, seconds, **kw)
    if name == "skew":
        return scenarios.skew(cap, warmup, seconds, **kw)
    if name == "multi":
        return scenarios.multi(cap, warmup, seconds, **kw)
    if name == "spike":
        return scenarios.spike(cap, warmup, seconds, **kw)
    if name == "fair":
        return scenarios.fair(cap, seconds, stagger_s=2.0 if quick else 3.0, **kw)
    if name == "overload":
        return scenarios.overload(cap, warmup, seconds,
                                  levels=(0.9, 1.5) if quick else (0.9, 1.2, 1.5), **kw)
    probe_s = 2.0 if quick else scenarios.MIX_PROBE_S
    if name == "mix":
        return scenarios.mix(cap, warmup, seconds, bench_mixes.ISSUE_MIX, **kw, probe_s=probe_s)
    if name == "random":
        return scenarios.random_mixes(cap, warmup, seconds, list(RANDOM_SEEDS[:mixes]), **kw,
                                      probe_s=probe_s)
    raise ValueError(f"unknown scenario {name!r}; expected one of {SCENARIOS}")


@contextlib.contextmanager
def fed(columns: bool) -> Iterator[None]:
    """Every feeder meanwhile pushes its events as Arrow tables, or as rows."""
    FEED["columns"] = columns
    try:
        yield
    finally:
        FEED["columns"] = False


@contextlib.contextmanager
def checkpoints(on: bool) -> Iterator[None]:
    """Every pool started meanwhile takes checkpoints as the default says, or none."""
    if on:
        yield
        return
    CONFIG["checkpoint_interval_s"] = 0.0
    try:
        yield
    finally:
        del CONFIG["checkpoint_interval_s"]


def busy(result: dict[str, Any]) -> dict[str, float]:
    """The executors' busy share per mode of a scenario's result (overload, skew: its last
    level; skew: its skewed shape)."""
    if "levels" in result:
        result = result["levels"][list(result["levels"])[-1]]
    if "shapes" in result:
        result = result["shapes"]["skewed"]
    return {m: r["utilization"] for m, r in result.items()
            if isinstance(r, dict) and "utilization" in r}


def print_side_by_side(results: dict[str, Any], other: str, label: str) -> None:
    """Each scenario's ratios and busy shares in the default arm and in `other`, side by side."""
    print(f"{label}:")
    for name, off in results[other].items():
        on = results[name]
        ratios = " ".join(f"{k} {on['ratios'][k]:.2f}/{v:.2f}" for k, v in off["ratios"].items()
                          if v is not None and on["ratios"].get(k) is not None)
        shares = " ".join(f"{m} {b:.2f}/{busy(off).get(m, float('nan')):.2f}"
                          for m, b in busy(on).items())
        print(f"  {name}: ratios {ratios or '-'}; busy {shares}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="all", choices=(*SCENARIOS, "all"))
    parser.add_argument("--duration", type=float, help="measured seconds per mode (default 20, quick 6; "
                        "fair: seconds with all three tenants active, default 12, quick 4)")
    parser.add_argument("--warmup", type=float, help="seconds per mode not counted (default 5, quick 2)")
    parser.add_argument("--calibrate", type=float, help="seconds to measure capacity (default 5, quick 2)")
    parser.add_argument("--quick", action="store_true", help="short runs: all scenarios in under 3 minutes")
    parser.add_argument("--mixes", type=int, help=f"random mixes to run (default {len(RANDOM_SEEDS)}, "
                        "quick 2), each drawn from a seed of its own")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario; figures are medians "
                        "over them, ratios also get their spread (default 1)")
    parser.add_argument("--checkpoints", default="on", choices=("on", "off", "both"),
                        help="checkpoints in every pool as the default has them (on), none "
                             "(off), or each scenario with and then without (both)")
    parser.add_argument("--input", default="rows", choices=("rows", "arrow", "both"),
                        help="the feeders push rows (lists of dicts), Arrow tables of the same "
                             "events, or each scenario with rows and then Arrow (both)")
    parser.add_argument("--push", default="whole", choices=("whole", "spread"),
                        help="the feeders send each batch as one call, to one source instance "
                             "in turn (whole), or a call to each instance (spread)")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--plots", help="write PNG plots to this folder (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.checkpoints == "both" and args.input == "both":
        parser.error("--checkpoints both and --input both: compare one thing at a time")
    ckpt_arms = {"on": (True,), "off": (False,), "both": (True, False)}[args.checkpoints]
    input_arms = {"rows": (False,), "arrow": (True,), "both": (False, True)}[args.input]
    # (checkpoints on, columns); the first arm's results are the scenario's own
    arms = [(on, cols) for on in ckpt_arms for cols in input_arms]
    warmup = args.warmup if args.warmup is not None else (2.0 if args.quick else 5.0)
    calib = args.calibrate if args.calibrate is not None else (2.0 if args.quick else 5.0)
    # "all": the scenarios of bench/results/cameo.json; the mixes run on their own.
    names = tuple(n for n in SCENARIOS if n not in ("mix", "random", "skew")) if args.scenario == "all" \
        else (args.scenario,)

    FEED["spread"] = args.push == "spread"
    started = ensure_ray()
    t0 = time.monotonic()
    try:
        capacity = measure_capacity(calib)
        print(f"the shared pool sustains {capacity.eps:,.0f} bulk events/s alone, flat out, "
              f"its executors {capacity.busy:.0%} busy, {capacity.cores:.2f} cores busy in all")
        results: dict[str, Any] = {}
        for name, (on, cols) in ((n, arm) for n in names for arm in arms):
            default = (4.0 if args.quick else 12.0) if name == "fair" else (6.0 if args.quick else 20.0)
            seconds = args.duration if args.duration is not None else default
            runs = []
            for i in range(args.repeat):
                print(f"{name}:" + (f" run {i + 1} of {args.repeat}" if args.repeat > 1 else "")
                      + ("" if on else " (checkpoints off)") + (" (Arrow input)" if cols else ""))
                with checkpoints(on), fed(cols):
                    runs.append(run_scenario(name, capacity, warmup, seconds, args.quick, turn=i,
                                             mixes=args.mixes or (2 if args.quick else len(RANDOM_SEEDS))))
                if any(v is not None for v in runs[-1]["ratios"].values()):
                    print("  ratios:", {k: round(v, 2) for k, v in runs[-1]["ratios"].items() if v is not None})
            r = scenarios.combine(runs)
            if (on, cols) == arms[0]:
                results[name] = r
            else:
                arm = "checkpoints_off" if not on else "arrow_input"
                results.setdefault(arm, {})[name] = r
            r["capacity_eps"], r["flat_out_busy"] = capacity.eps, capacity.busy
            if args.repeat > 1 and any(v is not None for v in r["ratios"].values()):
                print(f"  {name} median ratios over {args.repeat} runs:",
                      {k: f"{v:.2f} ({r['ratios_spread'][k][0]:.2f}-{r['ratios_spread'][k][1]:.2f})"
                       for k, v in r["ratios"].items() if v is not None})
        if "checkpoints_off" in results:
            print_side_by_side(results, "checkpoints_off", "checkpoints on / off")
        if "arrow_input" in results:
            print_side_by_side(results, "arrow_input", "rows / Arrow input")
        print(f"done in {time.monotonic() - t0:.0f} s")
    finally:
        if started:
            import ray

            ray.shutdown()
    save_json(args.json, results)
    if args.plots:
        from bench.harness import plots

        for path in plots.write_all(results, args.plots):
            print("wrote", path)
    return results


if __name__ == "__main__":
    main()
