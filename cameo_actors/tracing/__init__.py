"""Critical-path analysis of traced activities (SnailTrail), pure: no Ray, no Spark.

`records` is what executors trace; `pag` builds the program activity graph of a
window from it, `critical` computes each edge's critical participation by dynamic
programming, and `explain` ranks what the critical paths were made of, per pool and
per dataflow, in numbers and in words.
"""

from __future__ import annotations

from .critical import critical_participation, path_counts
from .explain import (
    DataflowPaths,
    Segment,
    dataflow_paths,
    explain,
    redact,
    snapshot,
    summarize,
)
from .pag import EDGE_KINDS, Edge, Pag, build_pag

__all__ = [
    "EDGE_KINDS",
    "DataflowPaths",
    "Edge",
    "Pag",
    "Segment",
    "build_pag",
    "critical_participation",
    "dataflow_paths",
    "explain",
    "path_counts",
    "redact",
    "snapshot",
    "summarize",
]
