"""The runtime's internals: nothing here is API; import from `cameo_actors.runtime`.

One package per side of a process boundary, and what both sides share:

- `client/`: what a `Runtime` handle does in the caller's process (the push session,
  reading outputs, waiting until settled);
- `controller/`: the controller actor and its managers (one job each), which reach the
  executors through one gateway;
- `executor/`: the executor actor and its logic without Ray (`core.py`), one part per
  concern on one message path;
- `exchange/`: what travels between processes and how (the bytes on the wire, channels,
  routes, the epoch markers of a migration);
- `checkpoint/`: the parts' format and the storage both sides read and write;
- `executor_api.py`: the executor's calls as one typed interface, with their records;
- `placement.py`, `stats.py`, `collector.py`: placement and routing tables, statistics
  and their merging, the cycle collector: shared by all sides;
- `cluster.py`, `remote.py`, `codebase.py`: Ray in one place, typed calls to an actor,
  the code a process runs.

The import contracts (pyproject.toml) keep the sides apart: the controller's managers
and the client never import the executor package, and neither imports the other.
"""
