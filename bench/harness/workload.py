"""Seeded, reproducible event streams for every benchmark and peer: the same events for every system.

    from bench.harness.workload import Workload
    w = Workload(rate_eps=20_000, seconds=30, profile="bursty", zipf_s=1.1, disorder_ms=50, seed=1)
    for at_s, events in w.batches():        # offsets from the start, and the events due then
        ...
    w.play(push, stop)                      # the same batches in real time, event time = wall clock
    w.write_files("in/")                    # the same batches as JSON-lines files (Spark file input)

    python -m bench.harness.workload OUT_DIR --rate 20000 --seconds 10 --profile bursty   # files, at once

Events are `{"ts": int ms, "key": str, "value": float}`. A batch is due every
`period_s`; its size follows the rate profile:

- steady:  `rate_eps` all the time;
- bursty:  `burst_factor` x `rate_eps` for `burst_s` seconds every `burst_every_s` seconds;
- diurnal: a sine around `rate_eps` with period `diurnal_s` and relative `amplitude`.

Keys are uniform over `keys` keys, or Zipf-skewed with exponent `zipf_s` > 0
(key "k0" the hottest). With `disorder_ms` > 0, each event's time lags its
batch's time by a uniform 0..disorder_ms, so event time is out of order
within that bound. The same seed gives the same events, batch by batch.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PROFILES = ("steady", "bursty", "diurnal")
Event = dict[str, Any]


@dataclass(frozen=True)
class Workload:
    rate_eps: float
    seconds: float
    seed: int = 0
    keys: int = 200
    zipf_s: float = 0.0
    disorder_ms: float = 0.0
    profile: str = "steady"
    period_s: float = 0.1
    burst_factor: float = 5.0
    burst_every_s: float = 5.0
    burst_s: float = 2.0
    diurnal_s: float = 60.0
    amplitude: float = 0.5

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"workload profile: expected one of {PROFILES}, got {self.profile!r}")
        if self.rate_eps < 0 or self.seconds < 0 or self.period_s <= 0 or self.keys < 1:
            raise ValueError("workload: expected rate_eps >= 0, seconds >= 0, period_s > 0 and keys >= 1, "
                             f"got {self.rate_eps}, {self.seconds}, {self.period_s}, {self.keys}")

    def rate_at(self, t_s: float) -> float:
        """Offered events/s at `t_s` seconds from the start."""
        if self.profile == "bursty":
            in_burst = t_s % self.burst_every_s >= self.burst_every_s - self.burst_s
            return self.rate_eps * (self.burst_factor if in_burst else 1.0)
        if self.profile == "diurnal":
            return self.rate_eps * (1.0 + self.amplitude * math.sin(2 * math.pi * t_s / self.diurnal_s))
        return self.rate_eps

    def bursts(self) -> list[tuple[float, float]]:
        """(start s, end s) of each burst of a bursty workload."""
        if self.profile != "bursty":
            return []
        starts = itertools.takewhile(lambda s: s < self.seconds,
                                     (k * self.burst_every_s + self.burst_every_s - self.burst_s
                                      for k in itertools.count()))
        return [(s, min(self.seconds, s + self.burst_s)) for s in starts]

    def batches(self, start_ms: int = 0) -> Iterator[tuple[float, list[Event]]]:
        """(offset s, events) for each batch; event time = start_ms + offset - disorder."""
        rng = random.Random(self.seed)
        pick = self._key_picker(rng)
        owed = 0.0  # fractional events carried to the next batch, so the mean rate is exact
        for i in range(int(self.seconds / self.period_s)):
            at_s = i * self.period_s
            owed += self.rate_at(at_s) * self.period_s
            n = int(owed)
            owed -= n
            base = start_ms + int(at_s * 1000)
            yield at_s, [{"ts": base - (int(rng.random() * self.disorder_ms) if self.disorder_ms else 0),
                          "key": pick(), "value": round(rng.random() * 100.0, 3)} for _ in range(n)]

    def total_events(self) -> int:
        return sum(len(b) for _, b in self.batches())

    def _key_picker(self, rng: random.Random) -> Callable[[], str]:
        names = [f"k{i}" for i in range(self.keys)]
        if self.zipf_s <= 0:
            return lambda: names[int(rng.random() * self.keys)]
        cum = list(itertools.accumulate(1.0 / (i + 1) ** self.zipf_s for i in range(self.keys)))
        return lambda: names[min(self.keys - 1, bisect.bisect_left(cum, rng.random() * cum[-1]))]

    def play(self, push: Callable[[list[Event]], Any], stop: threading.Event | None = None) -> float:
        """Push each batch when due, event time from the wall clock at the start; returns the
        start (ms since the epoch). Stops early when `stop` is set; a late push is not skipped."""
        start_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        for at_s, events in self.batches(start_ms):
            delay = max(0.0, t0 + at_s - time.monotonic())
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                break
            if events:
                push(events)
        return start_ms

    def write_files(self, folder: str, start_ms: int = 0, *, batches_per_file: int = 1) -> list[str]:
        """The batches as JSON-lines files `events-NNNNNN.json` (Spark's file source input);
        each is written under a hidden name and renamed, so a reader never sees half a file."""
        os.makedirs(folder, exist_ok=True)
        paths: list[str] = []
        groups = itertools.groupby(enumerate(self.batches(start_ms)), key=lambda x: x[0] // batches_per_file)
        for k, group in groups:
            lines = [json.dumps(e, separators=(",", ":")) for _, (_, evs) in group for e in evs]
            final = os.path.join(folder, f"events-{k:06d}.json")
            tmp = os.path.join(folder, f".events-{k:06d}.json.tmp")
            with open(tmp, "w") as f:
                f.write("".join(line + "\n" for line in lines))
            os.replace(tmp, final)
            paths.append(final)
        return paths


#: The throughput benchmarks' query is filter (this) -> map -> tumbling count per key.
THROUGHPUT_FILTER = "value > 10"
THROUGHPUT_EVENTS = 400_000


def throughput_workload(events: int = THROUGHPUT_EVENTS, seed: int = 1) -> Workload:
    """The throughput benchmarks' input (ours and the peers'): `events` events, 10 per ms
    of event time, 100 keys, uniform."""
    return Workload(rate_eps=10_000, seconds=events / 10_000, period_s=0.1, keys=100, seed=seed)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder for the JSON-lines files")
    p.add_argument("--rate", type=float, default=10_000, help="mean events/s")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--profile", choices=PROFILES, default="steady")
    p.add_argument("--keys", type=int, default=200)
    p.add_argument("--zipf", type=float, default=0.0, help="Zipf exponent of key popularity (0 = uniform)")
    p.add_argument("--disorder-ms", type=float, default=0.0, help="event time lags by up to this much")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batches-per-file", type=int, default=10)
    a = p.parse_args(argv)
    w = Workload(a.rate, a.seconds, seed=a.seed, keys=a.keys, zipf_s=a.zipf, disorder_ms=a.disorder_ms,
                 profile=a.profile)
    paths = w.write_files(a.out, batches_per_file=a.batches_per_file)
    print(f"wrote {w.total_events():,} events in {len(paths)} files to {a.out}")


if __name__ == "__main__":
    main()

