"""bench.peers.spark_fair for a few seconds: the shape and sanity of its result, not its speed.

`run()` goes in a child process: it needs a SparkContext of its own with the FAIR
scheduler (fixed when a context starts), which the session's shared `spark`
fixture, if already started in this process, is not; and a second context cannot
live in one process next to it. The child leaves that session, and py4j's thread
the conftest stops after the integration tests, alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys
from bench.peers.spark_fair import run
res = run(seconds=4, warmup=1, bulk_rate=2000, log=lambda line: print(line, file=sys.stderr))
with open(sys.argv[1], "w") as f:
    json.dump(res, f)
"""
SUMMARY = ("results", "p50_ms", "p95_ms", "p99_ms", "max_ms", "within_target", "target_ms")


def check_summary(s: dict[str, Any], target_ms: float) -> None:
    for f in SUMMARY:
        assert f in s, (f, s)
    assert s["results"] > 0
    assert 0 < s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] <= s["max_ms"], s
    assert 0.0 <= s["within_target"] <= 1.0
    assert s["target_ms"] == target_ms


def test_spark_fair_peer(tmp_path: Path) -> None:
    import pyspark

    from bench.peers import common

    out = tmp_path / "spark_fair.json"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())

    assert res["system"] == "spark-fair-pools" and res["version"] == pyspark.__version__
    assert set(res) == {"system", "version", "machine", "throughput", "latency", "notes"}
    assert res["throughput"] is None and res["notes"]
    lat = res["latency"]
    check_summary(lat["alerts"], common.ALERTS_TARGET_MS)
    check_summary(lat["bulk"], common.BULK_TARGET_MS)
    assert lat["offered_eps"] == {"alerts": 1000, "bulk": 2000.0}
    assert lat["seconds"] == 4 and lat["warmup_s"] == 1
    assert lat["pools_seen"] == {"alerts": ["alerts"], "bulk": ["bulk"]}
    for tenant in ("alerts", "bulk"):
        sp = lat["spark"][tenant]
        assert sp["ingested_eps"] >= 0 and sp["pushed"] > 0 and sp["backlog_at_feed_end"] >= 0
        assert sp["mean_batch_ms"] is not None and sp["mean_batch_ms"] > 0
