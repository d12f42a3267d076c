"""Reading results while a run goes on: a reader thread that commits what it reads, and
latencies of what it read."""

from __future__ import annotations

import threading
import time
from array import array
from typing import Any

from bench.harness.stats import quantile


class Reader(threading.Thread):
    """Reads and commits a dataflow's results continuously; `on_rows(sink, rows)` per read.

    A read that reaches a killed executor's new process before the controller noticed
    the death gets a bare KeyError (the new process does not know the dataflow, and
    `Runtime` passes the KeyError on while the dataflow is still listed running): such
    reads are counted (`key_errors`) and tried again, for up to a minute in a row."""

    def __init__(self, rt: Any, name: str, sinks: tuple[str, ...], on_rows: Any,
                 idle_s: float = 0.02) -> None:
        super().__init__(daemon=True, name=f"reader-{name}")
        self.rt, self.flow, self.sinks, self.on_rows = rt, name, sinks, on_rows
        self.idle_s = idle_s  # pause when a read found nothing (each read is Ray calls)
        self.key_errors = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def read_once(self) -> int:
        got = 0
        for sink in self.sinks:
            rows = self.rt.result_rows(self.flow, sink, commit=True)
            if rows:
                self.on_rows(sink, rows)
            got += len(rows)
        return got

    def run(self) -> None:
        failing_since: float | None = None
        try:
            while not self.stop.is_set():
                try:
                    got = self.read_once()
                except KeyError:
                    self.key_errors += 1
                    now = time.monotonic()
                    failing_since = failing_since or now
                    if now - failing_since > 60.0:
                        raise
                    time.sleep(0.05)
                    continue
                failing_since = None
                if not got:
                    time.sleep(self.idle_s)
        except BaseException as e:  # reported by the main thread
            self.error = e


class Latencies:
    """(ingest ms, egress ms) per result, appended by a Reader (`on_rows=lat.add`)."""

    def __init__(self) -> None:
        self.ingest, self.egress = array("d"), array("d")

    def add(self, _sink: str, rows: list[Any]) -> None:
        for _, ing, eg in rows:
            self.ingest.append(ing)
            self.egress.append(eg)

    def p99(self, lo_ms: float, hi_ms: float) -> tuple[float | None, int]:
        """p99 of egress - ingest of the results ingested in [lo, hi), and their number."""
        lat = [self.egress[i] - self.ingest[i] for i in range(len(self.ingest))
               if lo_ms <= self.ingest[i] < hi_ms]
        return quantile(lat, 0.99), len(lat)
