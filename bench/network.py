"""A keyed dataflow over three Ray nodes: on loopback addresses, and as hosts of their own
in network namespaces, CPU per event of every process side by side.

Run: `python -m bench.network [--events N] [--repeat R] [--delay-ms D] [--json FILE]`

`bench.throughput`'s dataflow (filter -> map -> keyed tumbling count) at parallelism 3
on a pool of 3 executors, one per node (a head with 2 CPUs, two workers with 1), every
step chained on its executor but the keyed exchange, run on two clusters of this machine,
one after the other, the same events:

- `loopback`: `LocalCluster`, the nodes on 127.0.0.2-4;
- `netns`: `NamespacedCluster`, the worker nodes each in a network namespace with a veth
  pair to a bridge, the head on the bridge: every call between nodes crosses a network
  stack. `--delay-ms` asks each veth for a delay (`tc netem`); a kernel without netem
  runs without one, and the JSON says why (`delay_error`).

Every process of a cluster descends from this one (the nodes' `ray start`, and the
driver: a process of its own per cluster), so `CpuMeter` counts them all: raylets, GCS,
executors, controller, the driver. Figures are
medians over --repeat runs after a warm-up run, rows and Arrow, each checked against
`run_local`'s results; `netns_over_loopback` is the CPU per event of one over the other.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, cast

from bench.harness.output import save_json
from bench.throughput import BATCH, as_columns, bench_ray, expected_results, make_events

NODES = 3


def run_on(cluster: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Each kind's runs on `cluster` (started here, stopped after), driven from a process
    of its own (this one may not join two clusters one after the other: Ray reads its
    auth token once), every process under this one counted."""
    cluster.start()
    try:
        storage = os.path.join(cluster.run_dir, "shared")  # every node sees this machine's disk
        done = subprocess.run(
            [sys.executable, "-m", "bench.network", "--drive", cluster.address, storage,
             "--events", str(args.events), "--repeat", str(args.repeat),
             "--meter-root", str(os.getpid())],
            env={**os.environ, **cluster.env}, capture_output=True, timeout=1_800)
        if done.returncode != 0:
            raise SystemExit(f"the driver on {cluster.address} failed: "
                             f"{done.stderr.decode(errors='replace')[-3000:]}")
        return cast(dict[str, Any], json.loads(done.stdout.decode().strip().splitlines()[-1]))
    finally:
        cluster.stop()
        shutil.rmtree(cluster.run_dir, ignore_errors=True)


def drive(address: str, storage: str, events_n: int, repeat: int, meter_root: int
          ) -> dict[str, Any]:
    """The driver's part: a pool of one executor per node, each kind's runs (rows, Arrow)
    after a warm-up run, their results checked."""
    import pyarrow as pa
    import ray

    from cameo_actors.runtime import Runtime, RuntimeConfig

    events = make_events(events_n)
    columns = as_columns(events)
    data = {"rows": events, "arrow": pa.Table.from_batches([columns])}
    expected = {"rows": expected_results(events), "arrow": expected_results(columns.to_pylist())}
    config = RuntimeConfig(num_executors=NODES, checkpoint_url=os.path.join(storage, "checkpoints"),
                           ingress_log_dir=os.path.join(storage, "ingress"))
    rt = Runtime.start(config, pool="bench-network", address=address)
    try:
        out: dict[str, Any] = {"addresses": sorted(e["address"] for e in rt.executor_stats())}
        for kind in ("rows", "arrow"):
            bench_ray(rt, data[kind], NODES, f"{kind}-warm", BATCH, expected[kind], meter_root)
            runs = [bench_ray(rt, data[kind], NODES, f"{kind}-{r}", BATCH, expected[kind],
                              meter_root)[2] for r in range(repeat)]
            cpu = statistics.median(p["machine"]["cpu_s"] for p in runs)
            out[kind] = {"events": len(data[kind]), "cpu_runs": [p["machine"]["cpu_s"] for p in runs],
                         "wall_runs": [p["wall_s"] for p in runs], "cpu_s_all": cpu,
                         "wall_s": statistics.median(p["wall_s"] for p in runs),
                         "cpu_us_per_event": round(1e6 * cpu / len(data[kind]), 2),
                         "exchange": runs[-1]["exchange"],
                         "cpu_s_by_role": runs[-1]["machine"]["cpu_s_by_role"]}
        return out
    finally:
        rt.shutdown(stop_ray=False)
        ray.shutdown()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=0.2,
                        help="the delay each veth adds per packet (default 0.2 ms; 0: none)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--drive", nargs=2, metavar=("ADDRESS", "STORAGE"),
                        help=argparse.SUPPRESS)  # the driver's process (run_on starts it)
    parser.add_argument("--meter-root", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        print(json.dumps(drive(*args.drive, args.events, args.repeat, args.meter_root)))
        return {}

    from cameo_actors.service.testing import LocalCluster, NamespacedCluster

    netns = NamespacedCluster(tempfile.mkdtemp(prefix="bench-netns-"), cpus=(2, 1, 1),
                              delay_ms=args.delay_ms or None)
    result: dict[str, Any] = {
        "events": args.events, "repeat": args.repeat, "nodes": NODES,
        "loopback": run_on(LocalCluster(tempfile.mkdtemp(prefix="bench-loop-"), cpus=(2, 1, 1)),
                           args),
        "netns": run_on(netns, args)}
    result["delay_ms"] = None if netns.delay_error else args.delay_ms or None
    result["delay_error"] = netns.delay_error
    result["netns_over_loopback"] = {
        kind: round(result["netns"][kind]["cpu_s_all"] / result["loopback"][kind]["cpu_s_all"], 3)
        for kind in ("rows", "arrow")}
    for arm in ("loopback", "netns"):
        for kind in ("rows", "arrow"):
            r = result[arm][kind]
            print(f"  {arm:8s} {kind:5s} {r['cpu_us_per_event']:6.2f} CPU µs per event, wall "
                  f"{r['wall_s']:.2f} s; {r['exchange']['calls']:,} calls between executors")
    print(f"netns / loopback, CPU per event: {result['netns_over_loopback']}"
          + (f" (no delay: {netns.delay_error})" if netns.delay_error else ""))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
