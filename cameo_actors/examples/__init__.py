"""Example dataflows and the events they read: two tenants on one pool.

The demo (`python -m cameo_actors.demo`), the Spark tier's demo
(`spark_ingest.demo`, whose file generator is `spark_ingest.events`) and the
benchmarks share them. Pure definitions: importing this package imports no Ray
or Spark.

>>> from cameo_actors.examples import alerts_dataflow, generate
>>> from cameo_actors.testing import run_local
>>> rows = run_local(alerts_dataflow(), {"logs": generate(2000)}).sinks["alerts"]
>>> len(rows), rows[0]
(4, {'ts': 15, 'key': 'k5', 'value': 96.0})
"""

from cameo_actors.examples.dataflows import alerts_dataflow, bulk_dataflow
from cameo_actors.examples.events import SCHEMA, generate

__all__ = ["SCHEMA", "alerts_dataflow", "bulk_dataflow", "generate"]
