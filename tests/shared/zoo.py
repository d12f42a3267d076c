"""Dataflows of every operator kind and event data, shared by unit and integration tests."""

from __future__ import annotations

import random
from typing import Any

from cameo_actors import Dataflow, avg, count, max_, min_, sum_


def events(n: int, seed: int = 1, keys: int = 6, disorder_ms: int = 30) -> list[dict[str, Any]]:
    """Events ~2 per ms of event time, a little out of order, some errors and texts."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append({"ts": max(0, i // 2 - rng.randrange(disorder_ms)),
                    "level": rng.choice(["INFO", "INFO", "WARN", "ERROR"]),
                    "key": f"k{rng.randrange(keys)}", "value": round(rng.uniform(-10, 100), 3),
                    "text": rng.choice(["a b", "b c d", "a"])})
    return out


SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float", "text": "str"}


def flows(name: str, p: int) -> list[Dataflow]:
    """One dataflow per operator kind; p = parallelism of keyed steps."""
    def df(suffix: str, target: float = 200) -> Dataflow:
        return Dataflow(f"{name}-{suffix}", latency_target_ms=target, tenant=f"t{suffix}")

    def src(d: Dataflow, sid: str = "s", lateness: int = 40):  # type: ignore[no-untyped-def]
        return d.source(sid, schema=SCHEMA, event_time="ts", allowed_lateness_ms=lateness)

    made = []
    d = df("filter")
    src(d).filter("level == 'ERROR' and value > 50").map({"ts": "ts", "v": "value * 2"}).sink("o")
    made.append(d)
    d = df("flat")
    (src(d).flat_map("tests.udfs:split_words", parallelism=p).key_by("word")
     .window(tumbling_ms=100, parallelism=p).aggregate(n=count()).sink("o"))
    made.append(d)
    d = df("tumbling")
    (src(d).key_by("key").window(tumbling_ms=50, parallelism=p)
     .aggregate(n=count(), total=sum_("value"), lo=min_("value"), hi=max_("value"), mean=avg("value"))
     .sink("o"))
    made.append(d)
    d = df("sliding")
    (src(d).key_by("key").window(sliding_ms=60, slide_ms=20, parallelism=p)
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    made.append(d)
    d = df("session")
    (src(d).filter("level == 'WARN'").key_by("key").window(session_gap_ms=15, parallelism=p)
     .aggregate(n=count()).sink("o"))
    made.append(d)
    d = df("join")
    left = src(d, "l").filter("level == 'ERROR'").key_by("key")
    right = src(d, "r").filter("level == 'WARN'").key_by("key")
    (left.join(right, tumbling_ms=40, parallelism=p)
     .map({"key": "key", "ts": "ts", "lv": "left.value", "rv": "right.value"}).sink("o"))
    made.append(d)
    d = df("union")
    a = src(d, "a").filter("value > 80")
    b = src(d, "b").filter("value < 0")
    a.union(b).key_by("level").window(tumbling_ms=100, parallelism=p).aggregate(n=count()).sink("o")
    made.append(d)
    return made


def canon(rows: list[dict[str, Any]]) -> list[str]:
    def norm(v: Any) -> Any:
        return round(v, 6) if isinstance(v, float) else v
    return sorted(repr(sorted((k, norm(v) if not isinstance(v, dict) else sorted(v.items()))
                              for k, v in r.items())) for r in rows)
