"""A small generator of JSON event files, landing one by one in a folder.

    python -m spark_ingest.events OUT_DIR --files 20 --rows 2000 --interval-ms 100

Rows are the example log events ({"ts", "level", "key", "value"}, 10 per ms of
event time, 5% errors; `cameo_actors.examples.generate`). Each file is written
under a hidden name and renamed into place, so Spark's file source (which
skips names starting with "." or "_") never sees half a file; the file's
modification time is its landing time. `bad_rows` appends rows that do not
match the schema (for the error output).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from cameo_actors.examples import generate

BAD_ROWS = ('{"ts": "not a number", "level": "INFO", "key": "k1", "value": 1.0}',
            '{"ts": 5, "level": "INFO", "key": "k1", "value": 1.0')


@dataclass(frozen=True)
class Landed:
    path: str
    rows: int
    landed_ms: float


def event_lines(n: int, start_ms: int, rate_per_ms: float, seed: int) -> list[str]:
    return [json.dumps(e, separators=(",", ":"))
            for e in generate(n, start_ms=start_ms, rate_per_ms=rate_per_ms, seed=seed)]


def write_file(folder: str, name: str, lines: list[str]) -> Landed:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.tmp")
    final = os.path.join(folder, name)
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
        f.write("\n")
    os.replace(tmp, final)
    return Landed(final, len(lines), os.stat(final).st_mtime * 1000.0)


def land_files(folder: str, files: int, rows: int, *, interval_s: float = 0.0,
               rate_per_ms: float = 10.0, seed: int = 7, bad_rows: int = 0,
               first: int = 0) -> Iterator[Landed]:
    """Write `files` files of `rows` events each, one every `interval_s` seconds.
    Event time runs on across files (file i starts at i * rows / rate_per_ms ms)."""
    start = time.monotonic()
    for i in range(first, first + files):
        lines = event_lines(rows, int(i * rows / rate_per_ms), rate_per_ms, seed + i)
        if bad_rows and i == first:
            lines.extend(BAD_ROWS[j % len(BAD_ROWS)] for j in range(bad_rows))
        yield write_file(folder, f"events-{i:05d}.json", lines)
        if interval_s:
            time.sleep(max(0.0, start + (i - first + 1) * interval_s - time.monotonic()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder the files land in")
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--rows", type=int, default=2000, help="events per file")
    p.add_argument("--interval-ms", type=float, default=100.0, help="time between files")
    p.add_argument("--bad-rows", type=int, default=0, help="rows off the schema in the first file")
    args = p.parse_args(argv)
    for landed in land_files(args.out, args.files, args.rows, interval_s=args.interval_ms / 1000,
                             bad_rows=args.bad_rows):
        print(landed.path, landed.rows)


if __name__ == "__main__":
    main()
