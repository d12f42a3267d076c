"""The web console (`/console/`) in a real headless Chromium driven by Playwright, against
the real service app on loopback over the session's local Ray (the `pools` fixture).

Two tenants' dataflows run and get events ("ops": alerts, a keyed one, a spare one to
cancel; "analytics": a keyed bulk one and one cancelled at once, so an ended one exists;
"nexmark": Nexmark's Q5 over generated bids).
With the admin token and with the "ops" token, the console is signed into through its form,
and each page must show what the API answers that token: the dataflows and their states,
a dataflow's state, target and graph, its checkpoints, the pool and the hotspots; a tenant
never sees the other tenant's names on any page. The actions (change the target, scale a
keyed step, cancel) go through their confirmation dialogs and the API then says they were
done. On every page: axe-core finds nothing serious or critical (labels and colour contrast
among its rules), the page logs no console error and throws nothing, and its alert area is
empty. The screenshots of the README (`docs/console/*.png`) are written by each run.

Needs the Debian package `chromium` (`bash .ci/system-deps`) and the Python packages
`playwright` and `axe-playwright-python` (the dev extra; no browser is downloaded): with CI
set, a missing one fails the test; locally it skips.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cameo_actors import Dataflow, count
from cameo_actors.nexmark import queries as nexmark
from cameo_actors.nexmark.generator import generate
from cameo_actors.service import console
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.testing import ServedApp
from tests.shared.polling import wait_for

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}
#: dataflow -> tenant
FLOWS = {"con-alerts": "ops", "con-keyed": "ops", "con-spare": "ops",
         "con-bulk": "analytics", "con-old": "analytics", "nexmark-q5": "nexmark"}
THEIRS = ("con-bulk", "con-old", "analytics", "nexmark-q5")  # the "ops" token never sees
LIVE = ("con-alerts", "con-keyed", "con-spare", "con-bulk")
TIMEOUT_MS = 30_000


def playwright_or_skip() -> Any:
    """The sync Playwright module, or a skip (a failure with CI set) naming what is missing."""
    missing = [] if os.path.exists(CHROMIUM) or shutil.which("chromium") else ["chromium"]
    try:
        from playwright import sync_api
    except ImportError:
        missing.append("playwright")
        sync_api = None
    try:
        import axe_playwright_python  # noqa: F401
    except ImportError:
        missing.append("axe-playwright-python")
    if missing:
        what = ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{what} missing: `bash .ci/system-deps` installs chromium, "
                        "`pip install -e .[dev]` the Python packages")
        pytest.skip(f"{what} not installed (bash .ci/system-deps; pip install -e .[dev])")
    return sync_api


def keyed(name: str, tenant: str, target_ms: float) -> Dataflow:
    """source -> key_by "kb" -> a tumbling window "win" (its keyed, scalable step) -> sink."""
    return (Dataflow(name, latency_target_ms=target_ms, tenant=tenant)
            .source("metrics", schema=SCHEMA, event_time="ts").key_by("key", id="kb")
            .window(tumbling_ms=100, id="win").aggregate(n=count()).sink("totals"))


def alerts(name: str, tenant: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=50, tenant=tenant)
            .source("metrics", schema=SCHEMA, event_time="ts")
            .filter("level == 'ERROR'").sink("out"))


def flows() -> list[Dataflow]:
    return [alerts("con-alerts", "ops"), keyed("con-keyed", "ops", 500),
            alerts("con-spare", "ops"), keyed("con-bulk", "analytics", 1000),
            alerts("con-old", "analytics")]


def events(start: int, n: int = 200) -> list[dict[str, Any]]:
    return [{"ts": start + j, "level": "ERROR" if j % 3 == 0 else "INFO", "key": f"k{j % 8}",
             "value": float(j)} for j in range(n)]


class Pusher:
    """Events into the live dataflows every half second while the tests run, so figures,
    charts and checkpoints keep changing under the pages (a dataflow ended is skipped)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        ts = 100_000
        while not self.stop.wait(0.5):
            ts += 500
            for name in LIVE:
                with contextlib.suppress(ServiceError, httpx.HTTPError):
                    self.client.push(name, "metrics", events(ts, 50))


class Env:
    """The served app, an admin client, and each caller's token and raw API access."""

    def __init__(self, service: ServedApp, client: Client, tokens: dict[str, str]) -> None:
        self.service = service
        self.client = client
        self.tokens = tokens
        self.http = {who: httpx.Client(base_url=service.url, timeout=30,
                                       headers={"Authorization": f"Bearer {token}"})
                     for who, token in tokens.items()}

    def get(self, who: str, path: str) -> Any:
        answer = self.http[who].get(path)
        assert answer.status_code == 200, f"GET {path} as {who}: {answer.text[:500]}"
        return answer.json()


@pytest.fixture(scope="module")
def env(pools: Any) -> Iterator[Env]:
    rt = pools["cameo2"]
    service = ServedApp(rt).start()
    client = Client(service.url, service.admin)
    tokens = {"admin": service.admin, "ops": service.tokens.create("ops")[0],
              "analytics": service.tokens.create("analytics")[0]}
    e = Env(service, client, tokens)
    pusher = Pusher(client)
    try:
        for d in flows():
            client.submit(d)
        client.cancel("con-old")
        # A Nexmark query of a third tenant, its events pushed once.
        client.submit(nexmark.q5())
        bids = generate(events=3_000, seed=5, rate_eps=100.0).events  # 30 s of event time
        for i in range(0, len(bids), 1_000):
            client.push("nexmark-q5", nexmark.SOURCE, bids[i:i + 1_000])
        for i in range(10):  # a few seconds of events, so each 1-s snapshot has results
            for name in LIVE:
                client.push(name, "metrics", events(i * 200))
            time.sleep(0.1)
        # Records off the schema: the error output has a sample to show.
        client.push("con-alerts", "metrics", [{"ts": "late", "level": 3, "key": None,
                                               "value": "x"}] * 3)
        wait_for(lambda: all(client.status(n)["results"] and client.explain(n)["snapshots"]
                             for n in ("con-alerts", "con-keyed")),
                 "results of con-alerts and con-keyed, and their traces")
        pusher.thread.start()
        yield e
    finally:
        pusher.stop.set()
        if pusher.thread.is_alive():
            pusher.thread.join(10)
        for name in FLOWS:
            with contextlib.suppress(ServiceError):  # ended, or never deployed
                client.cancel(name)
        for h in e.http.values():
            h.close()
        client.close_connection()
        service.stop()


@pytest.fixture(scope="module")
def browser(env: Env) -> Iterator[Any]:
    sync_api = playwright_or_skip()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def shown(value: float) -> str:
    """A number as the console shows it (en-US grouping, at most one decimal)."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}".rstrip("0").rstrip(".")


class Console:
    """One signed-in tab: its page, and what it logged as errors."""

    def __init__(self, browser: Any, env: Env, who: str) -> None:
        from playwright.sync_api import expect

        self.expect = expect
        self.env = env
        self.who = who
        self.context = browser.new_context(viewport=VIEWPORT)
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text} {m.location}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page: {e}"))
        self.sign_in()

    def sign_in(self) -> None:
        page = self.page
        page.goto(f"{self.env.service.url}/console")
        self.expect(page.get_by_label("Token")).to_be_visible()
        self.check()  # the sign-in form too
        page.get_by_label("Token").fill(self.env.tokens[self.who])
        page.get_by_test_id("signin-button").click()
        me = "admin" if self.who == "admin" else f"tenant {self.who}"
        self.expect(page.get_by_test_id("whoami")).to_have_text(me)
        self.expect(page.get_by_test_id("signin-button")).to_be_hidden()

    def open(self, route: str) -> None:
        """Go to a hash route and wait for that page's first refresh."""
        hash_ = self.page.evaluate("route => { location.hash = route; return location.hash; }",
                                   route)
        self.page.wait_for_function(
            "hash => document.getElementById('view').dataset.hash === hash && "
            "/^updated \\d\\d:\\d\\d:\\d\\d$/.test("
            "document.getElementById('updated').textContent)", arg=hash_)

    def next_refresh(self) -> None:
        """Wait until the page refreshed once more."""
        updated = self.page.get_by_test_id("updated")
        before = updated.text_content()
        self.page.wait_for_function(
            "before => document.querySelector('[data-testid=updated]').textContent !== before",
            arg=before, timeout=TIMEOUT_MS)

    def check(self, *, alerts: bool = True) -> None:
        """axe finds nothing serious or critical (and no unlabelled field, no low
        contrast); nothing was logged as an error; the alert area is empty."""
        from axe_playwright_python.sync_playwright import Axe

        results = Axe().run(self.page)
        violations = results.response["violations"]
        bad = [f"{v['id']} ({v['impact']}): {v['help']} at "
               f"{[n['target'] for n in v['nodes']][:3]}" for v in violations
               if v["impact"] in ("serious", "critical") or v["id"] in ("label",
                                                                         "color-contrast")]
        assert not bad, "\n".join(bad)
        assert not self.errors, "\n".join(self.errors)
        if alerts:
            texts = self.page.get_by_test_id("alert").all_text_contents()
            assert not texts, "\n".join(texts)

    def text(self) -> str:
        return str(self.page.evaluate("() => document.body.innerText + ' ' + "
                                      "document.documentElement.outerHTML"))

    def never_theirs(self) -> None:
        """A tenant's page holds no name of the other tenant (text or markup)."""
        if self.who == "admin":
            return
        text = self.text()
        leaked = [name for name in THEIRS if name in text]
        assert not leaked, f"{self.who} sees {leaked} on {self.page.url}"

    def screenshot(self, name: str) -> None:
        if self.who != "admin":
            return
        DOCS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(DOCS / name), full_page=True)

    def close(self) -> None:
        self.context.close()


@pytest.fixture(params=["admin", "ops"])
def tab(request: pytest.FixtureRequest, browser: Any, env: Env) -> Iterator[Console]:
    c = Console(browser, env, request.param)
    try:
        yield c
    finally:
        c.close()


def test_the_dataflows_page_lists_what_the_api_lists(tab: Console, env: Env) -> None:
    page, expect = tab.page, tab.expect
    tab.open("#/dataflows")
    listed = env.get(tab.who, "/v1/dataflows")["dataflows"]
    rows = page.get_by_test_id("dataflow-row")
    expect(rows).to_have_count(len(listed))
    got = {r.get_attribute("data-name"): r.get_by_test_id("df-state").inner_text()
           for r in rows.all()}
    assert got == {d["name"]: d["state"] for d in listed}
    mine = {n for n, t in FLOWS.items() if tab.who == "admin" or t == tab.who}
    # (the pool is shared: it keeps other modules' ended dataflows too)
    assert {n for n in got if n in FLOWS} == mine
    assert got.get("con-spare") == "running"
    if tab.who == "admin":
        assert got["con-old"] == "cancelled"
    for r in rows.all():
        name = r.get_attribute("data-name")
        d = next(x for x in listed if x["name"] == name)
        assert r.get_by_test_id("df-tenant").inner_text() == d["tenant"]
        assert r.get_by_test_id("df-target").inner_text() == shown(d["latency_target_ms"])
    tab.check()
    tab.never_theirs()
    tab.screenshot("dataflows.png")

    # The search filters in place, and keeps its text and focus across refreshes.
    search = page.get_by_label("Search")
    search.click()
    search.fill("con-k")
    expect(rows).to_have_count(1)
    tab.next_refresh()
    tab.next_refresh()
    assert search.input_value() == "con-k"
    assert page.evaluate("() => document.activeElement.id") == "search"
    expect(rows).to_have_count(1)
    search.fill("")
    page.get_by_label("State").select_option("ended")
    ended = [d["name"] for d in listed if d["state"] not in ("running", "finishing",
                                                            "recovering")]
    expect(rows).to_have_count(len(ended))
    page.get_by_label("State").select_option("running")
    expect(rows).to_have_count(len(listed) - len(ended))
    tab.check()

    # The link opens the dataflow's page; a reload keeps the tab signed in; signing out
    # forgets the token; a wrong token is refused in the alert area.
    page.get_by_test_id("df-name").filter(has_text="con-alerts").click()
    expect(page.get_by_test_id("df-title")).to_have_text("con-alerts")
    page.reload()
    expect(page.get_by_test_id("df-title")).to_have_text("con-alerts")
    page.get_by_test_id("signout-button").click()
    expect(page.get_by_label("Token")).to_be_visible()
    assert page.evaluate("() => sessionStorage.length") == 0
    assert not tab.errors, tab.errors
    page.get_by_label("Token").fill("not-a-token")
    page.get_by_test_id("signin-button").click()
    expect(page.get_by_test_id("alert").first).to_contain_text("unauthorized")
    expect(page.get_by_label("Token")).to_be_visible()
    assert all("status of 401" in e for e in tab.errors), tab.errors  # the browser's own line
    tab.errors.clear()


def test_the_console_files_need_no_token_and_forbid_inline_code(env: Env) -> None:
    with httpx.Client(base_url=env.service.url, timeout=30) as anonymous:
        moved = anonymous.get("/console")
        assert moved.status_code in (307, 308) and moved.headers["location"] == "/console/"
        for path, kind in (("/console/", "text/html"), ("/console/console.js", "text/javascript"),
                           ("/console/console.css", "text/css")):
            answer = anonymous.get(path)
            assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind)
            assert answer.headers["content-security-policy"] == console.CSP
            assert "'unsafe-inline'" not in console.CSP
            for header, value in (("cache-control", "no-store"),
                                  ("x-content-type-options", "nosniff"),
                                  ("referrer-policy", "no-referrer"),
                                  ("x-frame-options", "DENY")):
                assert answer.headers[header] == value, (path, header)
        page = anonymous.get("/console/").text
        # no inline script, handler or style: every script has a src, no tag has on...=
        assert not re.search(r"<script(?![^>]*\ssrc=)", page), "an inline script"
        assert not re.search(r"<[^>]*\s(on\w+|style)\s*=", page), "an inline handler/style"
        assert "<style" not in page
        assert anonymous.get("/console/other.js").status_code in (401, 404)
        assert anonymous.get("/v1/dataflows").status_code == 401  # the data needs the token


def test_a_dataflow_page_shows_its_status_graph_and_timeline(tab: Console, env: Env) -> None:
    page, expect = tab.page, tab.expect
    name = "con-keyed"
    tab.open(f"#/dataflow/{name}")
    status = env.get(tab.who, f"/v1/dataflows/{name}")
    expect(page.get_by_test_id("df-title")).to_have_text(name)
    expect(page.get_by_test_id("status-state")).to_have_text(status["state"])
    expect(page.get_by_test_id("status-target")).to_have_text(
        shown(status["latency_target_ms"]))
    expect(page.get_by_test_id("status-tenant")).to_have_text(status["tenant"])
    expect(page.get_by_test_id("status-weight")).to_have_text(shown(status["weight"]))

    graph = env.get(tab.who, f"/v1/dataflows/{name}/graph")
    steps = page.get_by_test_id("graph-step")
    expect(steps).to_have_count(len(graph["steps"]))
    assert {s.get_attribute("data-step") for s in steps.all()} == \
        {s["id"] for s in graph["steps"]}
    svg = page.locator("svg[data-testid=graph]")
    assert svg.get_attribute("role") == "img" and name in (svg.get_attribute("aria-label") or "")

    expect(page.get_by_test_id("latency-chart")).to_be_visible()
    expect(page.get_by_test_id("words")).to_be_visible()
    words = env.get(tab.who, f"/v1/dataflows/{name}/explain?last=60s")["words"]
    assert words, "the explanation has no words"

    timeline = env.get(tab.who, f"/v1/dataflows/{name}/timeline")["events"]
    assert timeline, "the timeline is empty"
    first = page.get_by_test_id("timeline-event").first
    expect(first).to_contain_text(timeline[0]["what"])
    spec = page.get_by_test_id("spec")
    page.get_by_text("Spec", exact=True).click()
    expect(spec).to_contain_text('"win"')
    expect(page.get_by_test_id("checkpoints-link")).to_be_visible()
    expect(page.get_by_test_id("action-update")).to_be_visible()  # its own: it may act
    tab.check()
    tab.never_theirs()
    tab.screenshot("dataflow.png")

    # The error output's sample and counts (records pushed off the schema).
    tab.open("#/dataflow/con-alerts")
    counts = env.get(tab.who, "/v1/dataflows/con-alerts")["errors"]
    assert counts, "no error records counted for con-alerts"
    expect(page.get_by_test_id("error-count")).to_have_count(len(counts))
    rows = env.get(tab.who, "/v1/dataflows/con-alerts/errors?limit=10")["rows"]
    expect(page.get_by_test_id("error-row")).to_have_count(len(rows))
    tab.check()
    tab.never_theirs()


def test_a_nexmark_querys_page_shows_its_graph_and_results(tab: Console, env: Env) -> None:
    if tab.who != "admin":  # another tenant's: not found, and named nowhere
        assert env.http["ops"].get("/v1/dataflows/nexmark-q5").status_code == 404
        return
    page, expect = tab.page, tab.expect
    name = "nexmark-q5"
    status = wait_for(lambda: (lambda s: s if s["results"] else None)(
        env.get("admin", f"/v1/dataflows/{name}")), "results of nexmark-q5")
    tab.open(f"#/dataflow/{name}")
    graph = env.get("admin", f"/v1/dataflows/{name}/graph")
    expect(page.get_by_test_id("graph-step")).to_have_count(len(graph["steps"]))
    assert {s["id"] for s in graph["steps"]} >= {"by_auction", "bids_per_auction", "hottest"}
    expect(page.get_by_test_id("status-tenant")).to_have_text("nexmark")
    expect(page.get_by_test_id("status-state")).to_have_text(status["state"])
    tab.check()


def test_the_checkpoints_page_shows_the_history(tab: Console, env: Env) -> None:
    page, expect = tab.page, tab.expect
    name = "con-keyed"
    path = f"/v1/dataflows/{name}/checkpoints"
    wait_for(lambda: env.get(tab.who, path)["history"], "a checkpoint of con-keyed")
    tab.open(f"#/dataflow/{name}/checkpoints")
    rows = page.get_by_test_id("ckpt-row")
    expect(rows.first).to_be_visible()

    def same() -> bool:  # checkpoints go on: the page's rows and the API's, at one refresh
        api = env.get(tab.who, path)
        ids = [str(c["id"]) for c in api["history"]]
        return [r.get_attribute("data-id") for r in rows.all()] == ids

    wait_for(same, "the page's checkpoints equal the API's", 30)
    # a completed checkpoint's phases, from its barriers to its parts written
    expect(page.get_by_test_id("ckpt-phases").first).to_contain_text("aligned")
    expect(page.get_by_test_id("ckpt-chart")).to_be_visible()
    expect(page.get_by_test_id("ckpt-restore")).to_be_visible()
    tab.check()
    tab.never_theirs()
    tab.screenshot("checkpoints.png")


def test_the_pool_and_hotspots_pages(tab: Console, env: Env) -> None:
    page, expect = tab.page, tab.expect
    tab.open("#/pool")
    overload = env.get(tab.who, "/v1/overload")
    expect(page.get_by_test_id("overload-feasible")).to_have_text(
        "yes" if overload["feasible"] else "no")
    if tab.who == "admin":
        executors = env.get("admin", "/v1/executors")["executors"]
        expect(page.get_by_test_id("executor-row")).to_have_count(len(executors))
        page.get_by_test_id("action-drain").click()  # the dialog opens; nothing is drained
        dialog = page.get_by_test_id("dialog-drain")
        expect(dialog).to_be_visible()
        expect(dialog.get_by_label("Node")).to_be_visible()
        tab.check()
        page.get_by_test_id("dialog-drain-dismiss").click()
        expect(dialog).to_be_hidden()
    else:
        expect(page.get_by_test_id("executors-note")).to_be_visible()
        expect(page.get_by_test_id("executor-row")).to_have_count(0)
        expect(page.get_by_test_id("action-drain")).to_have_count(0)
    tab.check()
    tab.never_theirs()
    tab.screenshot("pool.png")

    tab.open("#/hotspots")
    for table in ("hot-steps", "hot-misses", "hot-backlogs", "hot-executors"):
        expect(page.get_by_test_id(table)).to_be_visible()
    hot = env.get(tab.who, "/v1/hotspots")
    if "window_s" in hot:
        expect(page.get_by_test_id("hot-window")).to_contain_text(shown(hot["window_s"]))
    for key, row in (("steps", "hot-step-row"), ("misses", "hot-miss-row"),
                     ("backlogs", "hot-backlog-row"), ("executors", "hot-executor-row")):
        wait_for(lambda key=key, row=row: (
            page.get_by_test_id(row).count() == len(env.get(tab.who, "/v1/hotspots")[key])),
            f"the page's {key} equal the API's", 20)
    tab.check()
    tab.never_theirs()
    tab.screenshot("hotspots.png")


def test_the_actions_change_scale_move_and_cancel(browser: Any, env: Env) -> None:
    tab = Console(browser, env, "ops")
    try:
        page, expect = tab.page, tab.expect
        name = "con-keyed"
        tab.open(f"#/dataflow/{name}")
        before = env.get("ops", f"/v1/dataflows/{name}")["latency_target_ms"]
        target = before + 250

        # Change the target: the dialog, its labelled field, then the API says so.
        page.get_by_test_id("action-update").click()
        dialog = page.get_by_test_id("dialog-update")
        expect(dialog).to_be_visible()
        expect(dialog.get_by_label("Latency target (ms)")).to_have_value(shown(before)
                                                                          .replace(",", ""))
        dialog.get_by_label("Latency target (ms)").fill(str(int(target)))
        tab.check()  # the open dialog too
        page.get_by_test_id("dialog-update-confirm").click()
        expect(dialog).to_be_hidden()
        wait_for(lambda: env.get("ops", f"/v1/dataflows/{name}")[
            "latency_target_ms"] == target, "the new target", 30)
        expect(page.get_by_test_id("status-target")).to_have_text(shown(target))
        expect(page.get_by_test_id("action-result")).to_contain_text("done")

        # Scale the keyed step: the API's migrations list it, the graph shows it.
        page.get_by_test_id("action-scale").click()
        dialog = page.get_by_test_id("dialog-scale")
        expect(dialog).to_be_visible()
        dialog.get_by_label("Step").select_option("win")
        dialog.get_by_label("Parallelism").fill("2")
        page.get_by_test_id("dialog-scale-confirm").click()
        expect(dialog).to_be_hidden()
        wait_for(lambda: any(
            m["step"] == "win" and m["to_parallelism"] == 2
            for m in env.get("ops", f"/v1/dataflows/{name}/migrations")["migrations"]),
            "the scale in the migrations", 30)
        wait_for(lambda: any(
            s["id"] == "win" and s["parallelism"] == 2
            for s in env.get("ops", f"/v1/dataflows/{name}/graph")["steps"]),
            "win at parallelism 2")
        expect(page.locator("[data-testid=migration-row][data-step=win]").first).to_be_visible()
        expect(page.locator("[data-testid=graph-step][data-step=win]")).to_contain_text("\u00d72")
        tab.check()

        # Move instance 1 of the keyed step to the other executor: it comes back under a
        # new number, on that executor, and the graph says so.
        def win_instances() -> dict[str, int | None]:
            win = next(s for s in env.get("ops", f"/v1/dataflows/{name}/graph")["steps"]
                       if s["id"] == "win")
            return {i["id"]: i["executor"] for i in win["instances"]}

        wait_for(lambda: all(
            m["state"] != "running"
            for m in env.get("ops", f"/v1/dataflows/{name}/migrations")["migrations"]),
            "the scale done")
        before = win_instances()
        there = before[f"{name}/win/1"]
        to = next(e for e in (0, 1) if e != there)
        page.get_by_test_id("action-move").click()
        dialog = page.get_by_test_id("dialog-move")
        expect(dialog).to_be_visible()
        dialog.get_by_label("Step").select_option("win")
        dialog.get_by_label("Instance").fill("1")
        dialog.get_by_label("To executor").fill(str(to))
        tab.check()
        page.get_by_test_id("dialog-move-confirm").click()
        expect(dialog).to_be_hidden()
        def moved_instance() -> list[tuple[str, int | None]]:  # once the old one is gone
            now = win_instances()
            new = [(aid, ex) for aid, ex in now.items() if aid not in before]
            return new if f"{name}/win/1" not in now else []

        moved = wait_for(moved_instance, f"win/1 moved to executor {to}")
        assert [ex for _, ex in moved] == [to]
        number = moved[0][0].rsplit("/", 1)[1]
        expect(page.locator("[data-testid=graph-step][data-step=win]")).to_contain_text(
            f"{number}\u2192x{to}")
        tab.check()

        # Cancel the spare one.
        tab.open("#/dataflow/con-spare")
        page.get_by_test_id("action-cancel").click()
        dialog = page.get_by_test_id("dialog-cancel")
        expect(dialog).to_be_visible()
        page.get_by_test_id("dialog-cancel-confirm").click()
        wait_for(lambda: env.get(
            "ops", "/v1/dataflows/con-spare")["state"] == "cancelled", "con-spare cancelled", 30)
        expect(page.get_by_test_id("status-state")).to_have_text("cancelled")
        expect(page.get_by_test_id("action-cancel")).to_have_count(0)
        tab.check()
        tab.never_theirs()
    finally:
        tab.close()
