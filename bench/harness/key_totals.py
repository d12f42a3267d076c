"""The recovery benchmark's state kept per key (`python -m bench.recovery --state process`):
a keyed process holding, per key, what the day-long window aggregates."""

from __future__ import annotations

from typing import Any

from cameo_actors import KeyedProcess
from cameo_actors.operators.process import ProcessContext


class KeyTotals(KeyedProcess):
    """Per key: events, total value, least and greatest value, bytes. The totals are
    emitted at the key's 2nd, 4th, 8th, ... event: results all along that depend on the
    state kept (restored after a failure), and on the key's own order only."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        v = event["value"]
        if state:
            n = state["n"] = state["n"] + 1
            state["total"] += v
            state["lo"] = min(state["lo"], v)
            state["hi"] = max(state["hi"], v)
            state["bytes"] += event["size"]
        else:
            n = 1
            state.update(n=1, total=v, lo=v, hi=v, bytes=event["size"])
        if n >= 2 and n & (n - 1) == 0:
            return {"key": ctx.key, "ts": event["ts"], **state}
        return None
