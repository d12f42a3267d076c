"""The /ui page in a real headless Chromium, against the real service app on loopback over
the session's local Ray (the `pools` fixture: no other Ray is started).

Two tenants' dataflows run and get events; Chromium opens `/ui?token=...` (the token
becomes a cookie, the redirect strips it), and the DOM it renders must show every running
dataflow the token may see; the screenshot lands in RUN_DIR/test-ui/.

Needs the Debian package `chromium` (`bash .ci/system-deps`): with CI set, a missing
Chromium fails the test; locally it skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cameo_actors import Dataflow, count
from cameo_actors.service.app import create_app
from cameo_actors.service.auth import TokenStore, new_token
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.testing import free_port, fresh_dir

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-ui"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}
NAMES = {"ui-alerts": "ops", "ui-bulk": "analytics"}


def chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: run `bash .ci/system-deps` (as root) to install it")
    pytest.skip("chromium is not installed (bash .ci/system-deps installs it)")


class Served:
    """The service's app (create_app over ServiceCore over the pool) under uvicorn, in a
    thread of this process, on a free loopback port."""

    def __init__(self, rt: Any) -> None:
        import uvicorn

        self.admin = new_token()
        self.tokens = TokenStore(self.admin)
        app = create_app(ServiceCore(rt), self.tokens, snapshot=rt.stats_all)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1",
                                                    port=int(self.url.rsplit(":", 1)[1]),
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise TimeoutError(f"the service did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def flows() -> list[Dataflow]:
    alerts = (Dataflow("ui-alerts", latency_target_ms=50, tenant="ops")
              .source("logs", schema=SCHEMA, event_time="ts")
              .filter("level == 'ERROR'").sink("out"))
    bulk = (Dataflow("ui-bulk", latency_target_ms=1000, tenant="analytics")
            .source("metrics", schema=SCHEMA, event_time="ts")
            .key_by("key").window(tumbling_ms=100).aggregate(n=count()).sink("totals"))
    return [alerts, bulk]


@pytest.fixture(scope="module")
def served(pools: Any) -> Iterator[tuple[Served, Client]]:
    rt = pools["cameo2"]
    service = Served(rt).start()
    client = Client(service.url, service.admin)
    try:
        yield service, client
    finally:
        for name in NAMES:
            with contextlib.suppress(ServiceError):  # not deployed: nothing to cancel
                client.cancel(name)
        client.close_connection()
        service.stop()


def browse(url: str, out_dir: str, *, screenshot: str | None = None) -> str:
    """Chromium headless on `url`: the DOM it rendered (or, with `screenshot`, a PNG)."""
    profile = os.path.join(out_dir, f"profile-{time.monotonic_ns()}")
    args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,1600"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    run = subprocess.run([*args, url], capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def test_the_page_shows_every_running_dataflow_in_a_browser(served: tuple[Served, Client]
                                                            ) -> None:
    service, client = served
    out_dir = fresh_dir(RUN_DIR)
    for d in flows():
        client.submit(d)
    for i in range(20):  # a few seconds of events, so each 1-s snapshot has results
        ts = i * 200
        events = [{"ts": ts + j, "level": "ERROR" if j % 3 == 0 else "INFO",
                   "key": f"k{j % 4}", "value": float(j)} for j in range(200)]
        client.push("ui-alerts", "logs", events)
        client.push("ui-bulk", "metrics", events)
        time.sleep(0.1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (client.status("ui-alerts")["results"]
                                               and client.explain("ui-alerts")["snapshots"]):
        time.sleep(0.5)
    assert client.status("ui-alerts")["results"], "no results of ui-alerts within 30 s"
    explanation = client.explain("ui-alerts")
    assert explanation["snapshots"], "no snapshot of ui-alerts' traces within 30 s"
    assert set(explanation) >= {"words", "latency", "operators", "critical_path"}

    dom = browse(f"{service.url}/ui?token={service.admin}", out_dir)
    for name in NAMES:
        assert f"/ui/dataflows/{name}" in dom, dom[:3000]
    assert 'aria-label="latency against target"' in dom and 'aria-label="dataflow graph"' in dom
    assert 'name="token"' not in dom  # signed in through the cookie, not the login form

    ops = service.tokens.create("ops")[0]
    dom = browse(f"{service.url}/ui?token={ops}", out_dir)
    assert "/ui/dataflows/ui-alerts" in dom and "ui-bulk" not in dom

    assert 'name="token"' in browse(f"{service.url}/ui", out_dir)  # no token: the form

    png = os.path.join(out_dir, "ui.png")
    browse(f"{service.url}/ui?token={service.admin}", out_dir, screenshot=png)
    with open(png, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10_000
