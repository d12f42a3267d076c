"""cameo: deadline-aware multi-tenant stream processing on Ray.

What a user may import is exported here; everything else is internal.
"""

from cameo_actors.clock import Clock, FakeClock, SystemClock
from cameo_actors.dataflow import (
    ConnectorSpec,
    Dataflow,
    DataflowSpec,
    Stream,
    avg,
    count,
    max_,
    min_,
    sum_,
)
from cameo_actors.errors import CameoError, SpecError
from cameo_actors.operators.base import ErrorRecord

__all__ = [
    "CameoError", "Clock", "ConnectorSpec", "Dataflow", "DataflowSpec", "ErrorRecord", "FakeClock",
    "SpecError", "Stream", "SystemClock", "avg", "count", "max_", "min_", "sum_",
]
__version__ = "0.1.0"
