"""Generated log events: the input of the example dataflows."""

from __future__ import annotations

import random

from cameo_actors.operators.base import Event

#: The fields of a log event, as a source schema.
SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}


def generate(n: int, start_ms: int = 0, rate_per_ms: float = 10.0, seed: int = 7) -> list[Event]:
    """n log events, `rate_per_ms` events per ms of event time, 5% errors.

    Keys k0..k7, values uniform in [0, 100); the same seed gives the same events.
    """
    rng = random.Random(seed)
    return [{"ts": start_ms + int(i / rate_per_ms),
             "level": "ERROR" if rng.random() < 0.05 else "INFO",
             "key": f"k{rng.randrange(8)}",
             "value": rng.uniform(0, 100)} for i in range(n)]
