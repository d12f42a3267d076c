"""Feeders: threads or loops that push events into a dataflow on a schedule, event time
= the wall clock."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

#: `cameo_actors.examples.alerts_dataflow`'s name and source.
ALERTS, ALERTS_SOURCE = "alerts", "logs"


class AlertFeed(threading.Thread):
    """A steady light stream into alerts: every 10 ms, `eps / 100` log events, half of
    them ERROR and half of those above 90 (alerts), ts = now. Its events are drawn from
    `seed + 1`, apart from the suite's other streams of the same seed."""

    def __init__(self, rt: Any, eps: float, seed: int) -> None:
        super().__init__(daemon=True, name="alert-feed")
        self.rt, self.eps, self.seed = rt, eps, seed
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(self.seed + 1)
        per = max(1, int(self.eps / 100))
        next_t = time.monotonic()
        try:
            while not self.stop.is_set():
                now = int(time.time() * 1000)
                self.rt.push(ALERTS, ALERTS_SOURCE, [
                    {"ts": now, "level": "ERROR" if rng.random() < 0.5 else "INFO",
                     "key": f"h{rng.randrange(64)}", "value": 80.0 + 20.0 * rng.random()}
                    for _ in range(per)])
                next_t += 0.01
                self.stop.wait(max(0.0, next_t - time.monotonic()))
        except BaseException as e:  # reported by the main thread
            self.error = e


def generate(rt: Any, name: str, rate: float, period_s: float, stop: threading.Event,
             keys: int, max_batch: int = 1_000_000) -> None:
    """Push `rate` events/s to `name`'s source "s", a batch every `period_s`, event time
    = now, until `stop`."""
    n = max(1, min(max_batch, int(rate * period_s)))
    i = 0
    next_t = time.monotonic()
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        batch = [{"ts": now_ms, "key": f"k{(i + j) % keys}", "value": float((i + j) % 97)}
                 for j in range(n)]
        i += n
        rt.push(name, "s", batch, batch_size=n)
        next_t += period_s
        time.sleep(max(0.0, next_t - time.monotonic()))
