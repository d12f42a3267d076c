"""The definition layer: dataflows, specs, safe expressions. Imports no Ray or Spark."""

from cameo_actors.dataflow.builder import Dataflow, Stream, avg, count, max_, min_, sum_
from cameo_actors.dataflow.spec import ConnectorSpec, DataflowSpec

__all__ = ["ConnectorSpec", "Dataflow", "DataflowSpec", "Stream", "avg", "count", "max_", "min_",
           "sum_"]
