"""The runtime on Ray: executors hosting activations, a controller, and the Python API.

Public: `Runtime` (the API), `RuntimeConfig`, the operations of `interface`
(`ControlAPI`, `DataAPI`, `RuntimeAPI`), the records of `boundary` (what crosses the
runtime's boundary) and the errors of `exceptions`. Everything under `_private/` is
internal.

`Runtime` is imported on first use, so the pure parts (the boundary records,
the configuration) load without Ray.
"""

from typing import Any

from cameo_actors.runtime.boundary import (
    ActivationId,
    DataflowInfo,
    DataflowStats,
    DataflowSummary,
    ExecutorStats,
    MigrationInfo,
    PoolSnapshot,
    Rejected,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
    PoolInUse,
    PoolKept,
    PoolNotFound,
    ReconfigFailed,
    RuntimeUnavailable,
)
from cameo_actors.runtime.interface import ControlAPI, DataAPI, RuntimeAPI

__all__ = [
    "ActivationId", "ControlAPI", "DataAPI", "DataflowEnded", "DataflowExists", "DataflowInfo",
    "DataflowNotFound", "DataflowStats", "DataflowSummary", "ExecutorStats", "MigrationInfo",
    "PoolInUse", "PoolKept", "PoolNotFound", "PoolSnapshot", "ReconfigFailed", "Rejected", "Runtime",
    "RuntimeAPI", "RuntimeConfig", "RuntimeUnavailable", "start_local_ray",
]


def __getattr__(name: str) -> Any:
    if name in ("Runtime", "start_local_ray"):
        from cameo_actors.runtime import api

        return getattr(api, name)
    raise AttributeError(name)
