"""The two tenants' dataflows of the demos.

Tenant "ops" runs an error filter with a 50 ms target; tenant "analytics" a
per-key one-second windowed sum with a 1 s target. Without arguments they read
pushed events and keep their results in the runtime; the Spark tier's demo
passes connectors so that Spark feeds them and writes their results.
"""

from __future__ import annotations

from collections.abc import Mapping

from cameo_actors.dataflow import Dataflow, avg, count, sum_
from cameo_actors.dataflow.builder import ConnectorArg
from cameo_actors.examples.events import SCHEMA


def alerts_dataflow(*, source: ConnectorArg = None, sink: ConnectorArg = None,
                    errors: ConnectorArg = None, carry: Mapping[str, str] | None = None) -> Dataflow:
    """Tenant ops, 50 ms target: ERROR events above 90, from source "logs" to sink "alerts".

    Args:
        source, sink: connectors of the source and the sink (None: pushed, kept).
        errors: where the Spark tier writes the error output (None: counted only).
        carry: fields the source adds to `SCHEMA` (name -> type), kept in the results,
            e.g. {"landed_ms": "int"} from the Spark tier's file source.
    """
    extra = dict(carry or {})
    return (Dataflow("alerts", latency_target_ms=50, tenant="ops", errors=errors)
            .source("logs", schema={**SCHEMA, **extra}, event_time="ts", connector=source)
            .filter("level == 'ERROR' and value > 90")
            .map({"ts": "ts", "key": "key", "value": "round(value, 1)", **{f: f for f in extra}})
            .sink("alerts", connector=sink))


def bulk_dataflow(*, source: ConnectorArg = None, sink: ConnectorArg = None,
                  allowed_lateness_ms: int = 0) -> Dataflow:
    """Tenant analytics, 1 s target: count, sum and mean of `value` per key and second,
    from source "metrics" to sink "totals".

    Args:
        source, sink: connectors of the source and the sink (None: pushed, kept).
        allowed_lateness_ms: how far the watermark trails the largest event time seen.
    """
    return (Dataflow("bulk", latency_target_ms=1000, tenant="analytics")
            .source("metrics", schema=SCHEMA, event_time="ts",
                    allowed_lateness_ms=allowed_lateness_ms, connector=source)
            .key_by("key")
            .window(tumbling_ms=1000)
            .aggregate(n=count(), total=sum_("value"), mean=avg("value"))
            .sink("totals", connector=sink))
