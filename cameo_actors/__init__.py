"""cameo: deadline-aware multi-tenant stream processing on Ray.

What a user may import is exported here (and documented in the README):

- define dataflows: `Dataflow`, `Stream`, the aggregates, `DataflowSpec`, `ConnectorSpec`,
  and `KeyedProcess`, the base of a `process` step's user class;
- test them in-process: `run_local`, `TestingSource`, `TestingSink`, `Watermark`, `FakeClock`;
- run them on a pool: `Runtime`, `RuntimeConfig` (Ray), or through the service: `Client`;
- push events as Arrow columns: `arrow_schema` (a source's schema for pyarrow);
- the errors: `CameoError` (the root), `UserError` and its `SpecError` and
  `ColumnsRefused` (columns that do not fit a source's schema), the runtime's
  `DataflowNotFound`, `DataflowExists`, `PoolNotFound`, `RuntimeUnavailable`,
  `ReconfigFailed`, `PoolKept`, `PoolInUse`, and the
  service's `ServiceError`.

Everything else is internal (`cameo_actors.runtime._private`, and modules not named
here). `Runtime` and `Client` load on first use, so `import cameo_actors` needs
neither Ray nor an HTTP client.
"""

from typing import Any

from cameo_actors.clock import Clock, FakeClock, SystemClock
from cameo_actors.dataflow import (
    ConnectorSpec,
    Dataflow,
    DataflowSpec,
    Stream,
    avg,
    count,
    max_,
    max_by,
    min_,
    sum_,
    top,
)
from cameo_actors.errors import CameoError, SpecError, UserError
from cameo_actors.operators.base import ErrorRecord
from cameo_actors.operators.column_schema import arrow_schema
from cameo_actors.operators.exceptions import ColumnsRefused
from cameo_actors.operators.process import KeyedProcess
from cameo_actors.runtime import (
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
    PoolInUse,
    PoolKept,
    PoolNotFound,
    ReconfigFailed,
    RuntimeConfig,
    RuntimeUnavailable,
)
from cameo_actors.testing import TestingSink, TestingSource, Watermark, run_local

__all__ = [
    "CameoError", "Client", "Clock", "ColumnsRefused", "ConnectorSpec", "Dataflow", "DataflowEnded", "DataflowExists",
    "DataflowNotFound", "DataflowSpec", "ErrorRecord", "FakeClock", "KeyedProcess", "PoolInUse", "PoolKept", "PoolNotFound",
    "ReconfigFailed", "Runtime", "RuntimeConfig", "RuntimeUnavailable", "ServiceError", "SpecError", "Stream",
    "SystemClock", "TestingSink", "TestingSource", "UserError", "Watermark", "avg", "count", "max_",
    "arrow_schema", "max_by", "min_", "run_local", "sum_", "top",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from cameo_actors.runtime.api import Runtime

        return Runtime
    if name in ("Client", "ServiceError"):
        from cameo_actors.service import client

        return getattr(client, name)
    raise AttributeError(name)
