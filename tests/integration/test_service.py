"""The service end to end: a real `cameo serve` (embedded Ray) on loopback, driven
by the real `cameo` command and the Python client, scraped by a real Prometheus.

One service for the whole module; the tests run in file order and the last one
stops it with SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from cameo_actors import Dataflow, SpecError, count, sum_
from cameo_actors.service.client import ServiceError
from cameo_actors.service.testing import ServiceProcess, free_port, fresh_dir
from corpora import bad_input

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-service"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}
MAX_SPEC = 32 * 1024


def alerts(target: float = 50) -> Dataflow:
    return (Dataflow("alerts", latency_target_ms=target, tenant="ops")
            .source("logs", schema=SCHEMA, event_time="ts")
            .filter("level == 'ERROR'").sink("out"))


BULK_PY = '''
from cameo_actors import Dataflow, count, sum_

SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}
bulk = (Dataflow("bulk", latency_target_ms=1000, tenant="analytics")
        .source("metrics", schema=SCHEMA, event_time="ts")
        .key_by("key").window(tumbling_ms=100).aggregate(n=count(), total=sum_("value"))
        .sink("totals"))
'''


def events(start: int, n: int) -> list[dict[str, Any]]:
    return [{"ts": start + i, "level": "ERROR" if i % 3 == 0 else "INFO", "key": f"k{i % 4}",
             "value": float(i % 10)} for i in range(n)]


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceProcess]:
    run_dir = fresh_dir(RUN_DIR)
    service = ServiceProcess(run_dir, args=["--address", "local",  # embedded, even if RAY_ADDRESS
                                            "--executors", "2", "--num-cpus", "4",
                                            "--allow-module", "tests.", "--drain-timeout", "5",
                                            "--max-spec-bytes", str(MAX_SPEC)])
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def tokens(svc: ServiceProcess) -> dict[str, str]:
    """Tenant tokens made with the real CLI (`cameo token create`)."""
    return {t: svc.cli("token", "create", t).stdout.strip() for t in ("ops", "analytics")}


def test_admin_token_was_generated_user_only(svc: ServiceProcess) -> None:
    path = os.path.join(svc.run_dir, "service", "admin_token")
    assert os.stat(path).st_mode & 0o777 == 0o600
    info = svc.client().info()
    assert info["ray"]["token_auth"] is True  # Ray's own token auth stays on
    assert info["ray"]["address"].startswith("127.0.0.1:") and info["executors"] == 2


def test_missing_or_wrong_token_is_refused_and_changes_nothing(svc: ServiceProcess) -> None:
    before = svc.client().list()
    spec = alerts().spec.to_json()
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        for method, path in (("POST", "/v1/dataflows"), ("GET", "/v1/dataflows"),
                             ("DELETE", "/v1/dataflows/alerts"), ("GET", "/metrics")):
            r = httpx.request(method, svc.url + path, content=spec, headers=headers)
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["code"] == "unauthorized"
    run = svc.cli("submit", "-", token="not-the-token", check=False, stdin=spec)
    assert run.returncode == 1 and "HTTP 401" in run.stderr
    run = svc.cli("list", token="not-the-token", check=False)
    assert run.returncode == 1 and "bearer token is wrong" in run.stderr
    assert svc.client().list() == before


def test_validation_errors_come_back_as_4xx_and_change_nothing(svc: ServiceProcess) -> None:
    c = svc.client()
    before = c.list()
    headers = {"Authorization": f"Bearer {svc.admin_token}", "Content-Type": "application/json"}
    r = httpx.post(svc.url + "/v1/dataflows", content=b'{"name": "x", ', headers=headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_body"
    unknown = {**alerts().spec.to_dict(), "colour": "red"}
    r = httpx.post(svc.url + "/v1/dataflows", json=unknown, headers=headers)
    err = r.json()["error"]
    assert r.status_code == 422 and "colour" in err["got"] and err["fix"]
    huge = alerts().spec.to_dict()
    huge["steps"][1]["predicate"] = "level == '" + "E" * MAX_SPEC + "'"
    r = httpx.post(svc.url + "/v1/dataflows", json=huge, headers=headers)
    assert r.status_code == 413 and r.json()["error"]["expected"] == f"at most {MAX_SPEC} bytes"
    bad = alerts().spec.to_dict()
    bad["steps"][1]["predicate"] = "level = 'ERROR'"
    with pytest.raises(SpecError) as e:  # the definition layer's error, step and fix included
        c.submit(bad)
    assert e.value.step == bad["steps"][1]["id"] and e.value.fix
    # A function outside the modules the operator allowed (--allow-module tests.) is refused.
    with pytest.raises(SpecError, match="allowed module"):
        c.submit(Dataflow("fn", latency_target_ms=5).source("s", schema=SCHEMA)
                 .map(function="os:getcwd").sink("o"))
    for call in (lambda: c.status("no-such-flow"), lambda: c.cancel("no-such-flow")):
        with pytest.raises(ServiceError) as e2:
            call()
        assert e2.value.status == 404
    run = svc.cli("status", "no-such-flow", "--once", check=False)
    assert run.returncode == 1 and "HTTP 404" in run.stderr
    assert c.list() == before


class Pusher(threading.Thread):
    """Pushes events to both tenants' dataflows until stopped (like a live source)."""

    def __init__(self, svc: ServiceProcess, targets: dict[str, tuple[str, str]]) -> None:
        super().__init__(daemon=True)
        self.clients = {name: svc.client(tok) for name, (_, tok) in targets.items()}
        self.sources = {name: src for name, (src, _) in targets.items()}
        self.stop_flag = threading.Event()
        self.errors: list[str] = []
        self.ts = 0

    def run(self) -> None:
        while not self.stop_flag.is_set():
            batch = events(self.ts, 300)
            self.ts += 300
            for name, client in list(self.clients.items()):
                try:
                    client.push(name, self.sources[name], batch)
                except ServiceError as e:
                    if e.code != "dataflow_ended":  # a cancelled dataflow takes no more events
                        self.errors.append(str(e))
                    self.clients.pop(name)
            self.stop_flag.wait(0.05)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(10)


def test_two_tenants_submit_watch_update_and_cancel(svc: ServiceProcess, tokens: dict[str, str],
                                                    tmp_path) -> None:  # type: ignore[no-untyped-def]
    ops, ana = tokens["ops"], tokens["analytics"]
    spec_json = tmp_path / "alerts.json"
    spec_json.write_text(alerts().to_json())
    flows_py = tmp_path / "bulk_flows.py"
    flows_py.write_text(BULK_PY)

    t0 = time.perf_counter()
    out = svc.cli("submit", str(spec_json), token=ops).stdout
    submit_ms = (time.perf_counter() - t0) * 1000
    assert "alerts: created (tenant ops)" in out
    assert "bulk: created (tenant analytics)" in svc.cli("submit", str(flows_py), token=ana).stdout
    print(f"\n[measured] `cameo submit` of one spec, end to end (process start included): "
          f"{submit_ms:.0f} ms")
    # Idempotent: the same spec again starts no second copy; a changed one is refused.
    assert "unchanged" in svc.cli("submit", str(spec_json), token=ops).stdout
    spec_json.write_text(alerts(target=45).to_json())
    run = svc.cli("submit", str(spec_json), token=ops, check=False)
    assert run.returncode == 1 and "HTTP 409" in run.stderr and "latency_target_ms" in run.stderr
    # Tenants see only their own dataflows.
    assert [d["name"] for d in svc.client(ops).list()] == ["alerts"]
    assert json.loads(svc.cli("list", "--json", token=ana).stdout)[0]["name"] == "bulk"
    assert {"alerts", "bulk"} <= set(svc.cli("list").stdout.split())
    run = svc.cli("cancel", "bulk", token=ops, check=False)
    assert run.returncode == 1 and "HTTP 404" in run.stderr  # not ops' to cancel

    pusher = Pusher(svc, {"alerts": ("logs", ops), "bulk": ("metrics", ana)})
    pusher.start()
    try:
        deadline = time.monotonic() + 60
        while svc.client(ops).status("alerts")["results"] == 0 or \
                svc.client(ana).status("bulk")["results"] == 0:
            assert time.monotonic() < deadline, "no results within 60 s"
            time.sleep(0.3)
        # The live view refreshes: two frames, each with the percentiles against the target.
        frames = svc.cli("status", "alerts", "--count", "2", "--interval", "0.3", token=ops).stdout
        assert frames.count("cameo status  alerts  (tenant ops)") == 2
        for q in ("p50", "p95", "p99"):
            assert frames.count(f"  {q} ") == 2
        assert "target 50 ms" in frames and "within target" in frames

        assert "latency target 30 ms" in svc.cli("update", "alerts", "--target", "30",
                                                 token=ops).stdout
        status = svc.client(ops).status("alerts")
        assert status["latency_target_ms"] == 30 and status["state"] == "running"
        assert status["throughput"]["events_in_per_s"] > 0

        out = svc.cli("cancel", "bulk", token=ana).stdout
        assert "bulk: cancelled" in out
        assert [d["name"] for d in svc.client().list(["running"])] == ["alerts"]
        before = svc.client(ops).status("alerts")["results"]
        deadline = time.monotonic() + 30
        while svc.client(ops).status("alerts")["results"] <= before:
            assert time.monotonic() < deadline, "alerts stopped producing after bulk was cancelled"
            time.sleep(0.3)
        run = svc.cli("cancel", "bulk", token=ana, check=False)  # a second cancel
        assert run.returncode == 0 and "bulk: cancelled already" in run.stdout  # no error
    finally:
        pusher.stop()
    assert not pusher.errors, pusher.errors


def _prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of the shipped Grafana dashboard, variables filled in."""
    with open(os.path.join(ROOT, "deploy", "grafana", "cameo-dashboard.json"), encoding="utf-8") as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        for t in panel["targets"]:
            expr = (t["expr"].replace("$__rate_interval", "15s").replace("$dataflow", ".*")
                    .replace("$tenant", ".*"))
            out.append((panel["title"], expr))
    return out


def test_prometheus_scrapes_metrics_and_answers_a_histogram_query(svc: ServiceProcess,
                                                                   tokens: dict[str, str]) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing: .ci/run installs Debian's package")
        pytest.skip("Debian's prometheus is not installed here (.ci/run installs it)")
    t0 = time.perf_counter()
    text = svc.client().metrics()
    print(f"\n[measured] /metrics scrape through HTTP: {(time.perf_counter() - t0) * 1000:.1f} ms; "
          + next(line for line in text.splitlines() if line.startswith("cameo_scrape_duration")))
    assert 'cameo_result_latency_seconds_bucket{dataflow="alerts",le="0.05",tenant="ops"}' in text
    assert "cameo_executor_busy_seconds_total" in text

    prom_dir = fresh_dir(os.path.join(svc.run_dir, "prometheus"))
    with open(os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)  # the shipped config, pointed at this service
    config["global"]["scrape_interval"] = "1s"
    job = config["scrape_configs"][0]
    job["scrape_timeout"] = "1s"
    job["authorization"]["credentials_file"] = os.path.join(svc.run_dir, "service", "admin_token")
    job["static_configs"][0]["targets"] = [f"127.0.0.1:{svc.port}"]
    config_path = os.path.join(prom_dir, "prometheus.yml")
    with open(config_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "config", config_path], capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(os.path.join(prom_dir, "prometheus.log"), "wb") as log:
        prom = subprocess.Popen([binary, f"--config.file={config_path}",
                                 f"--storage.tsdb.path={os.path.join(prom_dir, 'data')}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
    client = svc.client(tokens["ops"])
    try:
        query = ('histogram_quantile(0.99, sum by (le, dataflow) '
                 '(cameo_result_latency_seconds_bucket{dataflow="alerts"}))')
        # Every panel of the shipped dashboard must be valid PromQL over these metrics and,
        # but for errors (none here), have data once a few scrapes saw live traffic.
        wanted = {title for title, _ in _dashboard_queries() if title != "Errors"}
        answered: set[str] = set()
        result: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        ts = 10_000_000
        while time.monotonic() < deadline and (not result or answered != wanted):
            client.push("alerts", "logs", events(ts, 200))
            ts += 200
            try:
                result = _prometheus_query(base, query)
                for title, expr in _dashboard_queries():
                    if _prometheus_query(base, expr):
                        answered.add(title)
            except OSError:
                pass  # Prometheus not up yet
            time.sleep(0.5)
        assert result, f"Prometheus has no latency histogram of 'alerts' after 60 s: see {prom_dir}"
        p99_s = float(result[0]["value"][1])
        assert 0 < p99_s <= 10, p99_s
        assert answered == wanted, f"dashboard panels without data: {wanted - answered}"
        up = _prometheus_query(base, 'up{job="cameo"}')
        assert up and up[0]["value"][1] == "1"
        busy = _prometheus_query(base, "cameo_executor_busy_seconds_total")
        assert {r["metric"]["executor"] for r in busy} == {"0", "1"}
    finally:
        prom.terminate()
        prom.wait(20)


def echo_spec() -> dict[str, Any]:
    """A source straight into a sink, two instances each: one result log per sink instance."""
    spec = (Dataflow("echo", latency_target_ms=200, tenant="ops")
            .source("in", schema={"ts": "int", "value": "any"}, event_time="ts", parallelism=2)
            .sink("out")).spec.to_dict()
    spec["steps"][-1]["parallelism"] = 2
    return spec


def _wait_for_results(client: Any, name: str, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.status(name)["results"] < n:
        assert time.monotonic() < deadline, f"{name}: fewer than {n} results after {timeout_s} s"
        time.sleep(0.2)


def _wait_readable(client: Any, name: str, n: int, timeout_s: float = 60.0) -> None:
    """Exactly-once (the default): results are readable once the checkpoint after them
    completed."""
    deadline = time.monotonic() + timeout_s
    while True:
        page = client.results(name, limit=1)
        if len(page["rows"]) + page["pending"] >= n:
            return
        assert time.monotonic() < deadline, f"{name}: fewer than {n} readable after {timeout_s} s"
        time.sleep(0.2)


def test_results_are_read_and_committed_over_http(svc: ServiceProcess,
                                                  tokens: dict[str, str]) -> None:
    from cameo_actors.service.outputs import RESULTS, Cursor

    ops = svc.client(tokens["ops"])
    assert ops.submit(echo_spec())["created"]
    try:
        sent = [{"ts": i, "value": float(i)} for i in range(600)]
        # An "any" field may be NaN (a float field may not): msgpack carries it, JSON says null.
        sent[5]["value"] = float("nan")
        ops.push("echo", "in", sent, batch_size=100)  # six requests: both source instances
        _wait_for_results(ops, "echo", 600)
        _wait_readable(ops, "echo", 600)

        # The client: pages after a cursor, across both sink instances; reading commits nothing.
        pages, cursor = [], None
        while not pages or pages[-1]["pending"]:
            pages.append(ops.results("echo", cursor=cursor, limit=250))
            cursor = pages[-1]["cursor"]
        rows = [r for p in pages for r in p["rows"]]
        assert len(pages) == 3 and sorted(r["event"]["ts"] for r in rows) == list(range(600))
        assert all(r["egress_ms"] >= r["ingest_ms"] > 0 for r in rows)
        nan_row = next(r for r in rows if r["event"]["ts"] == 5)
        assert nan_row["event"]["value"] != nan_row["event"]["value"]  # NaN, as pushed
        positions = Cursor.decode(cursor, RESULTS).positions
        assert sorted(positions) == ["echo/out/0", "echo/out/1"] and min(positions.values()) > 0
        assert sum(positions.values()) == 600

        # `cameo results --json --no-commit`: the same rows as JSON lines, NaN as null.
        out = svc.cli("results", "echo", "--json", "--no-commit", token=tokens["ops"]).stdout
        lines = [json.loads(line) for line in out.splitlines()]
        assert sorted(r["event"]["ts"] for r in lines) == list(range(600))
        assert next(r for r in lines if r["event"]["ts"] == 5)["event"]["value"] is None

        # Commit: the offsets move; a reader without a cursor starts after them, and an old
        # cursor is refused.
        assert ops.commit_results("echo", cursor) == {"cursor": cursor, "freed": 600,
                                                       "pending": 0}
        fresh = ops.results("echo")
        assert fresh["rows"] == [] and Cursor.decode(fresh["cursor"], RESULTS).positions == positions
        with pytest.raises(ServiceError) as e:
            ops.results("echo", cursor=pages[0]["cursor"])
        assert (e.value.status, e.value.code) == (409, "cursor_committed")
        with pytest.raises(ServiceError) as e:  # another tenant: the same 404 as elsewhere
            svc.client(tokens["analytics"]).results("echo")
        assert e.value.status == 404

        # `cameo results` commits what it printed.
        ops.push("echo", "in", [{"ts": 1000 + i, "value": 1.0} for i in range(40)])
        _wait_for_results(ops, "echo", 640)
        _wait_readable(ops, "echo", 40)
        out = svc.cli("results", "echo", "--json", token=tokens["ops"]).stdout
        assert sorted(json.loads(line)["event"]["ts"] for line in out.splitlines()) == \
            list(range(1000, 1040))
        assert ops.results("echo")["rows"] == []

        # follow(): rows as they come, each page committed once yielded.
        def feed() -> None:
            for k in range(3):
                time.sleep(0.3)
                ops_feed.push("echo", "in", [{"ts": 2000 + 30 * k + i, "value": 2.0}
                                             for i in range(30)])

        ops_feed = svc.client(tokens["ops"])  # a connection of its own for the other thread
        stop = threading.Event()
        guard = threading.Timer(60.0, stop.set)
        feeder = threading.Thread(target=feed, daemon=True)
        guard.start()
        feeder.start()
        try:
            got = [r["event"]["ts"] for r in ops.follow("echo", poll_s=0.1, limit=50,
                                                        max_rows=90, stop=stop)]
        finally:
            guard.cancel()
            feeder.join(10)
        assert sorted(got) == list(range(2000, 2090)), "follow() missed rows within 60 s"
        assert ops.results("echo")["rows"] == []

        # The error output: an event that does not fit the schema is read and committed.
        ops.push("echo", "in", [{"ts": "one", "value": 0.0}])
        deadline = time.monotonic() + 30
        while not (errs := ops.errors("echo"))["rows"]:
            assert time.monotonic() < deadline, "no error record within 30 s"
            time.sleep(0.2)
        assert [(r["step"], r["kind"], r["event"]["ts"]) for r in errs["rows"]] == \
            [("in", "malformed", "one")] and errs["dropped"] == 0
        assert ops.commit_errors("echo", errs["cursor"])["freed"] == 1
        assert ops.errors("echo")["rows"] == []

        # Once the sources are closed, following until the end stops by itself.
        ops.push("echo", "in", [{"ts": 3000, "value": 3.0}])
        ops.close("echo")
        stop = threading.Event()
        guard = threading.Timer(60.0, stop.set)
        guard.start()
        try:
            last = list(ops.follow("echo", poll_s=0.2, until_ended=True, stop=stop))
        finally:
            guard.cancel()
        assert not stop.is_set(), "follow(until_ended=True) did not stop within 60 s"
        assert [r["event"]["ts"] for r in last] == [3000]
    finally:
        with contextlib.suppress(ServiceError):
            ops.cancel("echo")


def test_events_pushed_as_arrow_over_http_give_the_results_of_json(
        svc: ServiceProcess, tokens: dict[str, str]) -> None:
    """An Arrow IPC body (the Python client's push of a table) beside JSON and msgpack
    pushes to the same source: one result set, run_local's; a body that is not Arrow, or
    whose columns do not fit the schema, is refused whole with the column named."""
    import pyarrow as pa

    from cameo_actors import run_local

    flow = (Dataflow("columns", latency_target_ms=500, tenant="analytics")
            .source("metrics", schema=SCHEMA, event_time="ts")
            .filter("value > 2").key_by("key").window(tumbling_ms=100).aggregate(n=count())
            .sink("totals"))
    sent = events(0, 3000)
    bulk = svc.client(tokens["analytics"])
    assert bulk.submit(flow)["created"]
    try:
        assert bulk.push("columns", "metrics", pa.Table.from_pylist(sent[:2000]), batch_size=700) == 2000
        bulk.push("columns", "metrics", sent[2000:2500])  # msgpack
        bulk.push("columns", "metrics", sent[2500:], use_msgpack=False)  # JSON
        url = "/v1/dataflows/columns/sources/metrics/events"
        bad = bulk.http.post(url, content=b"\x00not arrow",
                             headers={"Content-Type": "application/vnd.apache.arrow.stream"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_columns"
        with pytest.raises(ServiceError) as e:
            bulk.push("columns", "metrics", pa.table({"ts": [1], "level": ["x"], "key": [1],
                                                      "value": [1.0]}))
        assert (e.value.status, e.value.code) == (422, "invalid_columns")
        assert "column 'key': expected a string column" in str(e.value)
        bulk.close("columns")
        got = [r["event"] for r in bulk.follow("columns", poll_s=0.1, until_ended=True,
                                               commit=False)]
        page = bulk.results("columns", limit=10_000, columns=True)  # read as Arrow: the same rows
        table = page["rows"].drop_columns(["_ingest_ms", "_egress_ms"])
        want = run_local(flow, {"metrics": sent}).sinks["totals"]
        assert sorted(map(repr, got)) == sorted(map(repr, want)) and want
        assert page["pending"] == 0 and sorted(map(repr, table.to_pylist())) == sorted(map(repr, want))
    finally:
        with contextlib.suppress(ServiceError):
            bulk.cancel("columns")


def test_a_tenant_scales_its_window_over_http_while_events_flow(
        svc: ServiceProcess, tokens: dict[str, str]) -> None:
    """Scale and migrations through the real service: the client, `cameo migrations`,
    status and the metrics; the results equal run_local's."""
    from cameo_actors import run_local
    from tests.shared.zoo import canon

    flow = (Dataflow("rescaled", latency_target_ms=1000, tenant="analytics")
            .source("metrics", schema=SCHEMA, event_time="ts")
            .key_by("key").window(tumbling_ms=50, id="w").aggregate(n=count(), total=sum_("value"))
            .sink("totals"))
    analytics = svc.client(tokens["analytics"])
    analytics.submit(flow)
    data = [{"ts": i, "level": "INFO", "key": f"k{i % 97}", "value": float(i % 10)}
            for i in range(20_000)]
    try:
        analytics.push("rescaled", "metrics", data[:10_000])
        started = analytics.scale("rescaled", "w", 2, strategy="batched")
        assert started["state"] == "running" and started["to_parallelism"] == 2
        analytics.push("rescaled", "metrics", data[10_000:15_000])  # while it moves
        done = analytics.wait_migration(started["id"], timeout_s=60)
        assert done["state"] == "done" and done["bins_moved"] == 2048, done
        analytics.push("rescaled", "metrics", data[15_000:])
        listed = svc.cli("migrations", "rescaled", token=tokens["analytics"]).stdout
        assert started["id"] in listed and "done" in listed
        assert [m["id"] for m in analytics.status("rescaled")["migrations"]] == [started["id"]]
        with pytest.raises(ServiceError) as e:  # another tenant's dataflow: not even seen
            svc.client(tokens["ops"]).scale("rescaled", "w", 1)
        assert e.value.status == 404
        metrics = analytics.metrics()
        assert 'cameo_migration_bins_moved_total{dataflow="rescaled",step="w"} 2048.0' in metrics
        analytics.close("rescaled")
        rows = [r["event"] for r in analytics.follow("rescaled", until_ended=True, poll_s=0.1)]
        assert canon(rows) == canon(run_local(flow, {"metrics": data}).sinks["totals"])
    finally:
        analytics.cancel("rescaled")


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one HTTP/1.1 request on an open connection and read its answer (by length)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; so far: {data[:200]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection in the middle of an answer"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _request(method: str, path: str, token: str, body: bytes = b"",
             ctype: str = "application/json") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def test_bad_input_gets_a_4xx_harms_nothing_and_keeps_the_connection(
        svc: ServiceProcess, tokens: dict[str, str]) -> None:
    admin = svc.client()
    admin.submit(bad_input.victim_dataflow("input-victim", tenant="victims"))
    try:
        # The corpus on one keep-alive connection, with an outsider's token for the tenant cases.
        report = bad_input.probe(svc.url, svc.admin_token, tokens["ops"], "input-victim",
                                 source="events", max_spec_bytes=MAX_SPEC)
        print(f"\n[measured] {report['tried']} bad requests refused in {report['seconds']} s "
              f"on {report['connections']} connection(s)")
        assert report["non_4xx"] == []
        assert report["harmed"] == []
        assert report["unexpected"] == []
        assert report["answered_4xx"] == report["tried"] > 150
        assert report["connections"] == 1 and report["closed_by_server"] == 0

        # The same by hand on one raw socket: after each error answer, the next request works.
        spec = alerts().spec.to_dict()
        with socket.create_connection(("127.0.0.1", svc.port), timeout=30) as sock:
            for request, status in (
                    (_request("POST", "/v1/dataflows", svc.admin_token, b'{"name": '), 400),
                    (_request("POST", "/v1/dataflows", svc.admin_token, json.dumps(
                        {**spec, "latency_target_ms": 1}).replace(
                        '"latency_target_ms": 1', '"latency_target_ms": NaN').encode()), 400),
                    (_request("POST", "/v1/dataflows", svc.admin_token, b"[" * 50_000), 413),
                    (_request("POST", "/v1/dataflows", svc.admin_token, b"[" * 20_000), 400),
                    (_request("PATCH", "/v1/dataflows/input-victim", svc.admin_token,
                              b'{"weight": Infinity}'), 400),
                    (_request("GET", "/v1/nowhere", svc.admin_token), 404),
                    (_request("DELETE", "/v1/dataflows/input-victim", "wrong-token"), 401),
                    (_request("GET", "/v1/whoami", svc.admin_token), 200)):
                got, headers, body = _exchange(sock, request)
                assert got == status, body[:300]
                assert headers.get("connection") != "close"
                assert json.loads(body)  # every answer, errors included, is JSON
        status = admin.status("input-victim")
        assert (status["state"], status["latency_target_ms"], status["weight"]) == \
            ("running", 1000, 1.0)
        assert "Exception in ASGI application" not in svc.log()  # nothing escaped to uvicorn
    finally:
        with contextlib.suppress(ServiceError):
            admin.cancel("input-victim")


def test_sigterm_stops_running_dataflows_cleanly_and_says_so(svc: ServiceProcess) -> None:
    assert [d["name"] for d in svc.client().list(["running"])] == ["alerts"]
    assert svc.stop() == 0
    log = svc.log()
    assert "SIGTERM: shutting down" in log
    assert "dataflow 'alerts' (tenant 'ops') stopped cleanly: sources closed" in log
    assert "service stopped" in log
    with pytest.raises(httpx.TransportError):
        httpx.get(svc.url + "/healthz", timeout=2)


def test_ended_dataflows_outlive_the_service_and_its_pool(svc: ServiceProcess,
                                                          tokens: dict[str, str]) -> None:
    """The SIGTERM above stopped the pool for good (its registry and checkpoints went);
    the service started again over the same folder still lists the dataflows that ended,
    and answers for them as it did when they ended."""
    svc.start()
    ops = svc.client(tokens["ops"])
    listed = {d["name"]: d for d in ops.list()}
    assert listed["alerts"]["state"] == "cancelled", listed
    status = ops.status("alerts")
    assert status["results"] > 0 and status["history"][-1]["state"] == "cancelled"
    headers = {"Authorization": f"Bearer {tokens['ops']}"}
    timeline = httpx.get(f"{svc.url}/v1/dataflows/alerts/timeline", headers=headers,
                         timeout=30).json()["events"]
    assert timeline[0]["kind"] == "state" and timeline[0]["what"].startswith("running")
    assert any(e["kind"] == "state" and e["what"].startswith("cancelled") for e in timeline)
    checkpoints = httpx.get(f"{svc.url}/v1/dataflows/alerts/checkpoints", headers=headers,
                            timeout=30).json()
    assert checkpoints["completed"] == len([r for r in checkpoints["history"] if r["ok"]]) > 0
    analytics = svc.client(tokens["analytics"])
    assert "alerts" not in {d["name"] for d in analytics.list()}
    with pytest.raises(ServiceError) as e:
        analytics.status("alerts")
    assert e.value.status == 404
    assert svc.stop() == 0
