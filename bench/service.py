"""The service over HTTP: throughput per tenant, isolation from a slow reader, bad input.

Run: `python -m bench.service [--quick] [--json FILE]`

Starts a real `cameo serve` (embedded Ray, two executors) on loopback and measures,
in one run:

- **throughput**: events pushed per second and results read per second by one tenant,
  with JSON bodies, with msgpack and with Arrow IPC streams (results read as each),
  through a pass-through dataflow (push everything, wait until every result is
  readable, then read and commit every result page by page: the read rate is the API's,
  not the dataflow's or its checkpoints');
- **isolation**: the p99 of one tenant's API calls (push 100 events, read and commit its
  results) alone, and again while another tenant's result log is full and that tenant
  keeps pushing (answered 429; it waits the Retry-After it is given, as a writer should);
  reported side by side and as a ratio;
- **bad input**: the corpus of bad requests (`corpora.bad_input`: bodies,
  specs, updates, paths, tokens) and a set of bad event values, with the share answered
  4xx (bad requests) or written to the error output (bad events), and the dataflows
  harmed (a victim dataflow checked before and after).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import httpx
import msgpack
import numpy as np
import pyarrow as pa

from bench.harness.output import save_json
from bench.harness.stats import interpolated_p99
from cameo_actors import Dataflow
from cameo_actors.operators.column_ipc import ARROW_STREAM, to_ipc
from cameo_actors.service.testing import ServiceProcess, fresh_dir
from corpora import bad_input as corpus

SCHEMA = {"ts": "int", "level": "str", "value": "float", "extra": "any"}
#: A dataflow's state budget: its result logs hold at half of it (a slow reader fills it fast).
BUDGET = 16_000_000


def passthrough(name: str, tenant: str, state_bytes: int | None = None) -> Dataflow:
    return (Dataflow(name, latency_target_ms=100, tenant=tenant, state_bytes=state_bytes)
            .source("in", schema=SCHEMA, event_time="ts").filter("level != ''").sink("out"))


def events(start: int, n: int) -> list[dict[str, Any]]:
    return [{"ts": start + i, "level": "INFO", "value": i * 0.5, "extra": None} for i in range(n)]


def columns(start: int, n: int) -> pa.Table:
    """`events(start, n)` as columns, built as a columnar writer has them."""
    i = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"ts": i, "level": pa.array(["INFO"] * n), "value": i * 0.5,
                     "extra": pa.nulls(n)})


class Tenant:
    """One tenant's HTTP session (keep-alive), in JSON or msgpack (pushes of an Arrow
    table go as Arrow IPC streams, and with `arrow` results are read as them)."""

    def __init__(self, url: str, token: str, use_msgpack: bool = False,
                 arrow: bool = False) -> None:
        self.http = httpx.Client(base_url=url, timeout=60.0,
                                 headers={"Authorization": f"Bearer {token}"})
        self.msgpack = use_msgpack
        self.arrow = arrow

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> httpx.Response:
        headers: dict[str, str] = {}
        content = None
        if isinstance(body, pa.Table):
            content, body = to_ipc(body), None
            headers["Content-Type"] = ARROW_STREAM
        if body is not None:
            if self.msgpack:
                content = msgpack.packb(body, use_bin_type=True)
                headers["Content-Type"] = "application/msgpack"
            else:
                content = httpx.Request("POST", "/", json=body).content
                headers["Content-Type"] = "application/json"
        if self.arrow:
            headers["Accept"] = ARROW_STREAM
        elif self.msgpack:
            headers["Accept"] = "application/msgpack"
        return self.http.request(method, path, content=content, headers=headers,
                                 params=params or None)

    def decode(self, r: httpx.Response) -> Any:
        if r.headers.get("content-type", "").startswith("application/msgpack"):
            return msgpack.unpackb(r.content, raw=False)
        return r.json()

    def push(self, name: str, batch: list[dict[str, Any]] | pa.Table) -> httpx.Response:
        return self.call("POST", f"/v1/dataflows/{name}/sources/in/events", batch)

    def wait_readable(self, name: str, n: int, timeout_s: float = 120.0) -> None:
        """Until `n` results can be read (exactly once: after the checkpoint that follows
        them)."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            r = self.http.get(f"/v1/dataflows/{name}/results", params={"limit": 1})
            if r.status_code == 200 and r.json()["pending"] + 1 >= n:
                return
            time.sleep(0.05)

    def read_page(self, name: str, limit: int = 10_000) -> int:
        """Read one page of results and commit it; the rows read."""
        r = self.call("GET", f"/v1/dataflows/{name}/results", limit=limit)
        if r.status_code == 429:  # over the tenant's request rate: wait as told
            time.sleep(float(r.headers.get("Retry-After", 1)))
            return 0
        r.raise_for_status()
        if r.headers.get("content-type", "").startswith(ARROW_STREAM):
            rows, cursor = pa.ipc.open_stream(r.content).read_all().num_rows, r.headers["cameo-cursor"]
        else:
            page = self.decode(r)
            rows, cursor = len(page["rows"]), page["cursor"]
        if rows:
            self.call("POST", f"/v1/dataflows/{name}/results/commit", {"cursor": cursor})
        return rows


def throughput(svc: ServiceProcess, admin: Tenant, token: str, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in ("json", "msgpack", "arrow"):
        name = f"tp-{fmt}"
        make = columns if fmt == "arrow" else events
        # A budget that holds every result: pushing and reading are measured apart.
        admin.call("POST", "/v1/dataflows",
                   passthrough(name, "bench", state_bytes=2_000_000_000).spec.to_dict())
        t = Tenant(svc.url, token, use_msgpack=fmt != "json", arrow=fmt == "arrow")
        t0 = time.perf_counter()
        early = 0  # results read while pushing (only if the log filled)
        for i in range(0, n, 5_000):
            r = t.push(name, make(i, 5_000))
            while r.status_code == 429:  # the log is full: read, then push again
                early += t.read_page(name)
                r = t.push(name, make(i, 5_000))
            r.raise_for_status()
        pushed_s = time.perf_counter() - t0
        admin.call("POST", f"/v1/dataflows/{name}/close")
        t.wait_readable(name, n - early)  # reads are timed apart from the run's checkpoints
        t1 = time.perf_counter()
        read = 0
        while read < n - early and time.perf_counter() - t1 < 120:
            read += t.read_page(name) or 0
        read_s = time.perf_counter() - t1
        out[fmt] = {"events": n, "pushes_per_s": n / pushed_s, "results_read": early + read,
                    "results_read_per_s": read / read_s if read_s else None}
        admin.call("DELETE", f"/v1/dataflows/{name}")
    return out


def steady_calls(t: Tenant, name: str, seconds: float, start: int) -> list[float]:
    """The tenant's call latencies (ms): push 100 events, read and commit its results."""
    lat: list[float] = []
    deadline = time.monotonic() + seconds
    i = start
    while time.monotonic() < deadline:
        for call in (lambda at=i: t.push(name, events(at, 100)), lambda: t.read_page(name)):
            t0 = time.perf_counter()
            r = call()
            lat.append((time.perf_counter() - t0) * 1000.0)
            if isinstance(r, httpx.Response) and r.status_code == 429:
                # Its own results wait for the next checkpoint to be readable: on a fast
                # day the pushes fill its log first. A writer reads, then goes on.
                t.read_page(name)
            elif isinstance(r, httpx.Response) and r.status_code >= 400:
                raise RuntimeError(f"{name}: {r.request.method} {r.request.url.path} answered "
                                   f"{r.status_code}: {r.text[:300]}")
        i += 100
    return lat


def isolation(svc: ServiceProcess, admin: Tenant, tokens: dict[str, str], seconds: float
              ) -> dict[str, Any]:
    steady = Tenant(svc.url, tokens["steady"])
    hoarder = Tenant(svc.url, tokens["hoarders"], use_msgpack=True)
    admin.call("POST", "/v1/dataflows", passthrough("steady", "steady").spec.to_dict())
    admin.call("POST", "/v1/dataflows", passthrough("hoard", "hoarders").spec.to_dict())
    alone = steady_calls(steady, "steady", seconds, 0)
    # The hoarder never reads: its log fills, then every push of its gets 429.
    statuses: dict[int, int] = {}
    stop = threading.Event()

    def hoard() -> None:
        i = 0
        while not stop.is_set():
            r = hoarder.push("hoard", events(i, 2_000))
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            i += 2_000
            if r.status_code == 429:  # a well-behaved writer waits as it is told
                stop.wait(float(r.headers.get("Retry-After", 1)))

    thread = threading.Thread(target=hoard, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while statuses.get(429, 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    beside = steady_calls(steady, "steady", seconds, 10**7)
    stop.set()
    thread.join(60)
    for name in ("steady", "hoard"):
        admin.call("DELETE", f"/v1/dataflows/{name}")
    return {"calls_alone": len(alone), "p99_ms_alone": interpolated_p99(alone),
            "calls_beside_full_log": len(beside), "p99_ms_beside_full_log": interpolated_p99(beside),
            "p99_ratio": interpolated_p99(beside) / interpolated_p99(alone), "hoarder_answers": statuses}


BAD_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("an int beyond 64 bits", {"ts": 2**70, "level": "x", "value": 1.0, "extra": None}),
    ("an int beyond 64 bits in an any field", {"ts": 1, "level": "x", "value": 1.0,
                                               "extra": -(2**80)}),
    ("a missing field", {"ts": 1, "level": "x", "extra": None}),
    ("a string where an int goes", {"ts": "1", "level": "x", "value": 1.0, "extra": None}),
    ("a bool where an int goes", {"ts": True, "level": "x", "value": 1.0, "extra": None}),
    ("an object where a string goes", {"ts": 1, "level": {"a": 1}, "value": 1.0, "extra": None}),
    ("a list where a float goes", {"ts": 1, "level": "x", "value": [1.0], "extra": None}),
]


def bad_input(svc: ServiceProcess, admin: Tenant, tokens: dict[str, str]) -> dict[str, Any]:
    admin.call("POST", "/v1/dataflows", passthrough("victim", "ops").spec.to_dict())
    requests = corpus.probe(svc.url, svc.admin_token, tokens["bench"], "victim")
    # Bad event values: each pushed beside good events goes to the error output, counted.
    before = admin.decode(admin.call("GET", "/v1/dataflows/victim"))
    batch = [e for _, e in BAD_EVENTS] + events(10**6, 10)
    answer = admin.push("victim", batch)
    answer.raise_for_status()
    pushed = admin.decode(answer)
    time.sleep(1.0)
    after = admin.decode(admin.call("GET", "/v1/dataflows/victim"))
    errors = sum(after["errors"].values()) - sum(before["errors"].values())
    admin.call("DELETE", "/v1/dataflows/victim")
    return {"requests": requests,
            "events": {"tried": len(BAD_EVENTS), "refused_at_the_edge": pushed.get("rejected", 0),
                       "in_error_output": errors,
                       "good_events_through": after["events_out"] - before["events_out"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer events, shorter phases")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    n, seconds = (50_000, 4.0) if args.quick else (400_000, 15.0)
    svc = ServiceProcess(fresh_dir(".run/bench-service"), args=[
        "--address", "local", "--executors", "2", "--num-cpus", "4",
        "--state-budget-bytes", str(BUDGET)])  # the default per-tenant request limits
    with svc:
        admin = Tenant(svc.url, svc.admin_token)
        tokens = {t: admin.decode(admin.call("POST", "/v1/tokens", {"tenant": t}))["token"]
                  for t in ("bench", "steady", "hoarders", "ops")}
        figures = {"throughput": throughput(svc, admin, tokens["bench"], n),
                   "isolation": isolation(svc, admin, tokens, seconds),
                   "bad_input": bad_input(svc, admin, tokens)}
    for fmt, f in figures["throughput"].items():
        print(f"{fmt:8s} pushes {f['pushes_per_s']:>10,.0f} ev/s   results read "
              f"{f['results_read_per_s'] or 0:>10,.0f} rows/s")
    iso = figures["isolation"]
    print(f"one tenant's API calls p99: alone {iso['p99_ms_alone']:.1f} ms, beside a full log "
          f"{iso['p99_ms_beside_full_log']:.1f} ms (x{iso['p99_ratio']:.2f}); the hoarder got "
          f"{iso['hoarder_answers']}")
    bad = figures["bad_input"]
    req = bad["requests"]
    print(f"bad requests: {req['tried']} tried, {req['answered_4xx']} answered 4xx, "
          f"{len(req['non_4xx'])} otherwise, {len(req['harmed'])} dataflows harmed")
    ev = bad["events"]
    print(f"bad events: {ev['tried']} tried, {ev['refused_at_the_edge']} refused at the edge, "
          f"{ev['in_error_output']} in the error output, {ev['good_events_through']} good ones "
          "through")
    save_json(args.json, figures)


if __name__ == "__main__":
    main()
