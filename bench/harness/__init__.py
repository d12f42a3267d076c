"""What the benchmarks share; each suite (`bench.cameo`, `bench.migration`, ...) imports
from here and never from another suite.

- `cluster`: a private Ray when none is up, waits on a dataflow's end, process memory;
- `stats`: quantiles and latency summaries, one definition for every suite;
- `fingerprint`: an order-independent fingerprint of a result multiset, to compare a
  run's results with `run_local`'s;
- `threads`: the failure checks and stops of the suites' feeder and reader threads;
- `feeds`: feeders that push on a schedule (the alerts tenant, a flat rate);
- `results`: a reader that reads and commits results as they come, and latencies;
- `tenants`: the two-tenant setup (alerts beside bulk) and the pool's capacity for it;
- `runner`: deploy dataflows with their workloads on a fresh pool and measure them;
- `workload`: seeded, reproducible event streams (the same events for every system);
- `work`: user functions of a fixed CPU cost;
- `output`: the figures as JSON; `plots`: PNG plots (matplotlib);
- `spark`: a pool with Spark in front of it.

The harness imports no suite (an import contract in pyproject.toml keeps it so).
"""
