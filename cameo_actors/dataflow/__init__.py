"""The definition layer: dataflows, specs, safe expressions. Imports no Ray or Spark.

Modules, each importing only those before it: `expression_builtins`,
`expression_parser`, `expressions` and `expression_batches` (safe expressions: what
they may call, their checker, their compiler for one event and for batches),
`functions` (function paths), `spec` (the data and its wire forms),
`validate` (the rules a spec must meet), `builder` (the fluent `Dataflow`).
Importing this package installs `validate` as the check `DataflowSpec.from_dict`
runs, so the spec module never imports its rules back.
"""

from cameo_actors.dataflow.builder import (
    Dataflow,
    Stream,
    avg,
    count,
    max_,
    max_by,
    min_,
    sum_,
    top,
)
from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec, set_validator
from cameo_actors.dataflow.validate import validate as _validate

set_validator(_validate)

__all__ = ["ConnectorSpec", "Dataflow", "DataflowSpec", "Stream", "avg", "count", "max_", "max_by",
           "min_", "sum_", "top"]
