"""A corpus of bad requests for the service, and a runner that sends them.

Every case is a request a correct service refuses with a 4xx, changing nothing:
malformed bodies (bad JSON or msgpack, a wrong content type, empty, too large, too
deep, NaN or Infinity in JSON), bad specs, bad updates, bad reconfigurations (scale,
migrate, the pool's executors, a dataflow's scaling settings), bad paths and query
parameters, unknown dataflows and sources, bad tokens, and events bodies that are
not lists of objects. Bad event *values* are not here: a service accepts those and
the dataflow's error output gets them.

`probe` sends the corpus on one keep-alive connection and checks that a running
dataflow, the victim, came through unharmed: same state, target and weight, and a
good event pushed afterwards still produces a result. The unit tests run it against
the app over an in-memory runtime, the integration tests against `cameo serve`::

    report = probe(url, admin_token, tenant_token, "input-victim")
    assert report["non_4xx"] == [] and report["harmed"] == []

This module only builds requests and reads answers (httpx); it imports no server code.
It is a test corpus, not part of the product: the tests of the service and
`bench.service` use it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack

from cameo_actors.dataflow.builder import Dataflow, count

JSON = "application/json"
MSGPACK = "application/msgpack"
#: Every spec of the corpus has this name: one accepted by mistake is found and cancelled.
PROBE_NAME = "bad-input-probe"
SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}
#: An event the victim of `victim_dataflow` turns into a result.
GOOD_EVENT: dict[str, Any] = {"ts": 1, "level": "ERROR", "key": "k", "value": 1.0}
NAN, INF = float("nan"), float("inf")
#: How the runner authenticates a case: the tokens given to `probe`, or a bad header.
AUTH_HEADERS = {
    "none": None,
    "wrong": "Bearer not-a-token-of-this-service",
    "basic": "Basic YWRtaW46YWRtaW4=",
    "empty": "Bearer",
    "long": "Bearer " + "x" * 6000,
}


@dataclass(frozen=True)
class BadRequest:
    """One bad request.

    Attributes:
        kind: body, spec, update, reconfig, path, dataflow, token or events.
        description: what is wrong with it, for reports.
        method, path: the request line (the path is relative to the service's URL).
        body: the raw body (None: no body).
        content_type: its Content-Type header (None: none sent).
        auth: "admin" or "tenant" (the tokens given to `probe`), or a key of AUTH_HEADERS.
        params: query parameters.
        expect: the status a correct service answers (None: any 4xx).
        needle: a text the error body must contain (the field it names), or None.
        chunked: send the body in pieces without a Content-Length.
    """

    kind: str
    description: str
    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = JSON
    auth: str = "admin"
    params: tuple[tuple[str, str], ...] = ()
    expect: int | None = 422
    needle: str | None = None
    chunked: bool = False


def victim_dataflow(name: str = "input-victim", tenant: str = "victims") -> Dataflow:
    """A dataflow for `probe` to guard: every ERROR event (e.g. GOOD_EVENT) is a result."""
    return (Dataflow(name, latency_target_ms=1000, tenant=tenant)
            .source("events", schema=SCHEMA, event_time="ts")
            .filter("level == 'ERROR'").sink("out"))


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()  # NaN and Infinity as JSON's non-standard tokens


def _mp(data: Any) -> bytes:
    return msgpack.packb(data, use_bin_type=True)


def nested(depth: int, leaf: Any = 1) -> Any:
    """`leaf` inside `depth` lists: a body deeper than a parser should follow."""
    data = leaf
    for _ in range(depth):
        data = [data]
    return data


def _base() -> dict[str, Any]:
    """A valid spec to break: source, key_by, a tumbling window, a sink."""
    return (Dataflow(PROBE_NAME, latency_target_ms=100)
            .source("src", schema=SCHEMA, event_time="ts").key_by("key", id="keyed")
            .window(tumbling_ms=1000, id="win").aggregate(n=count()).sink("out")).spec.to_dict()


def broken_spec(change: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
                steps: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The base spec with top-level fields changed or dropped, and steps' fields changed
    (a value of ... removes the field)."""
    spec = _base()
    spec.update(change or {})
    for key in drop:
        spec.pop(key, None)
    for index, fields in (steps or {}).items():
        for key, value in fields.items():
            if value is ...:
                spec["steps"][index].pop(key, None)
            else:
                spec["steps"][index][key] = value
    return spec


def _filter_spec(predicate: Any) -> dict[str, Any]:
    """The base spec's source, a filter with `predicate`, a sink."""
    return broken_spec({"steps": [_base()["steps"][0],
                            {"op": "filter", "id": "f", "inputs": ["src"], "predicate": predicate},
                            {"op": "sink", "id": "out", "inputs": ["f"]}]})


def _sized(body: bytes, limit: int, status: int) -> int:
    """The status of a body that is bad in its content, unless it is too large to be read."""
    return status if len(body) <= limit else 413


def corpus(victim: str, source: str, *, max_spec_bytes: int = 256 * 1024,
           max_body_bytes: int = 16 * 1024 * 1024, max_update_bytes: int = 4096
           ) -> list[BadRequest]:
    """Every bad request, aimed at `victim` (a running dataflow) and its `source` where
    a case needs a real target. The limits are the service's, so that the too-large
    cases are just too large."""
    spec_path, flow = "/v1/dataflows", f"/v1/dataflows/{victim}"
    events = f"{flow}/sources/{source}/events"
    cases: list[BadRequest] = []

    def body(description: str, raw: bytes, expect: int | None, *, ctype: str | None = JSON,
             path: str = spec_path, chunked: bool = False, needle: str | None = None) -> None:
        cases.append(BadRequest("body", description, "POST", path, raw, ctype, expect=expect,
                                chunked=chunked, needle=needle))

    # -- malformed bodies ----------------------------------------------------------------------
    good = _json(broken_spec())
    body("JSON cut short", b'{"name": ', 400)
    body("JSON with trailing garbage", good + b" x", 400)
    body("JSON with single quotes", b"{'name': 'x'}", 400)
    body("an empty body", b"", 400)
    body("a body of whitespace", b" \n\t ", 400)
    body("invalid UTF-8 in JSON", b'{"name": "\xc3\x28"}', 400)
    for token in ("NaN", "Infinity", "-Infinity"):
        body(f"{token} as the latency target in JSON",
             good.replace(b'"latency_target_ms": 100', b'"latency_target_ms": ' + token.encode()),
             400, needle=token)
    huge = good.replace(b'"latency_target_ms": 100', b'"latency_target_ms": ' + b"7" * 5000)
    body("an integer of 5000 digits in JSON", huge, _sized(huge, max_spec_bytes, 400))
    deep = b"[" * 50_000 + b"]" * 50_000
    body("JSON nested 50,000 deep", deep, _sized(deep, max_spec_bytes, 400))
    body("JSON nested 100 deep inside a spec field",
         _json({**broken_spec(), "name": nested(100)}), 400, needle="nest")
    body("JSON nested 65 deep, brackets in strings not counted",
         _json([nested(64, "[[[[")]), 400, needle="65 levels")
    body("bytes that are not msgpack", b"\xc1\xc1", 400, ctype=MSGPACK)
    body("msgpack cut short", _mp(broken_spec())[:-7], 400, ctype=MSGPACK)
    body("msgpack with bytes after the object", _mp(broken_spec()) + b"\x01", 400, ctype=MSGPACK)
    body("msgpack nested 2000 deep", b"\x91" * 2000 + b"\x90", 400, ctype=MSGPACK)
    body("msgpack nested 100 deep", _mp(nested(100)), 400, ctype=MSGPACK)
    body("msgpack map with integer keys", _mp({1: 2}), 400, ctype=MSGPACK)
    body("a spec as text/plain", good, 415, ctype="text/plain")
    body("a spec as application/xml", b"<spec/>", 415, ctype="application/xml")
    body("a form instead of a spec", b"name=x", 415, ctype="application/x-www-form-urlencoded")
    body("a spec larger than the limit", b"{" + b" " * max_spec_bytes + b"}", 413)
    body("a spec over the limit, chunked without a length", b"{" + b" " * max_spec_bytes + b"}",
         413, chunked=True)

    # -- bad specs -----------------------------------------------------------------------------
    def spec(description: str, data: Any, expect: int | None = 422, *, mp: bool = False,
             needle: str | None = None, auth: str = "admin",
             params: tuple[tuple[str, str], ...] = ()) -> None:
        raw = _mp(data) if mp else _json(data)
        cases.append(BadRequest("spec", description, "POST", spec_path, raw,
                                MSGPACK if mp else JSON, auth=auth, params=params,
                                expect=None if expect is None else
                                _sized(raw, max_spec_bytes, expect), needle=needle))

    spec("a list instead of a spec", [], needle="not an object")
    spec("a string instead of a spec", "spec")
    spec("null instead of a spec", None)
    spec("an unknown top-level field", broken_spec({"colour": "red"}), needle="colour")
    for field in ("name", "steps", "latency_target_ms"):
        spec(f"no {field}", broken_spec(drop=(field,)), needle=field)
    spec("a number as the name", broken_spec({"name": 5}))
    spec("a name with a space", broken_spec({"name": "a b"}))
    spec("a name of 200 characters", broken_spec({"name": "n" * 200}))
    spec("an empty name", broken_spec({"name": ""}))
    spec("a tenant with a slash", broken_spec({"tenant": "a/b"}))
    for value, what in ((0, "0"), (-5, "-5"), ("fast", "a string"), (True, "true"),
                        (None, "null"), (1e9, "over a day"), (10**30, "a 31-digit integer")):
        spec(f"latency target {what}", broken_spec({"latency_target_ms": value}),
             needle="latency_target_ms")
    # json.dumps cannot write 1e999: Python's parser reads it as Infinity.
    cases.append(BadRequest("spec", "latency target 1e999 in JSON (read as Infinity)", "POST",
                            spec_path, good.replace(b'"latency_target_ms": 100',
                                                    b'"latency_target_ms": 1e999'),
                            needle="latency_target_ms"))
    spec("NaN latency target in msgpack", broken_spec({"latency_target_ms": NAN}), mp=True,
         needle="latency_target_ms")
    spec("Infinity latency target in msgpack", broken_spec({"latency_target_ms": INF}), mp=True,
         needle="latency_target_ms")
    for value, what, mp in ((NAN, "NaN", True), (INF, "Infinity", True), (0, "0", False),
                            ("heavy", "a string", False), (1e300, "1e300", False)):
        spec(f"weight {what}", broken_spec({"scheduling": {"weight": value}}), mp=mp, needle="weight")
    spec("rate limit -5", broken_spec({"scheduling": {"rate_limit_eps": -5}}), needle="rate_limit_eps")
    spec("NaN rate limit in msgpack", broken_spec({"scheduling": {"rate_limit_eps": NAN}}), mp=True,
         needle="rate_limit_eps")
    spec("expected rate 0", broken_spec({"scheduling": {"expected_rate_eps": 0}}),
         needle="expected_rate_eps")
    spec("expected rate as text", broken_spec({"scheduling": {"expected_rate_eps": "lots"}}),
         needle="expected_rate_eps")
    spec("Infinity expected rate in msgpack", broken_spec({"scheduling": {"expected_rate_eps": INF}}),
         mp=True, needle="expected_rate_eps")
    spec("scheduling as a string", broken_spec({"scheduling": "fast"}))
    spec("an unknown scheduling field", broken_spec({"scheduling": {"priority": 1}}),
         needle="priority")
    for value, what in ((-5, "-5"), (50, "50"), ("fast", "a string")):
        spec(f"checkpoint interval {what}",
             broken_spec({"fault_tolerance": {"checkpoint_interval_ms": value}}),
             needle="checkpoint_interval_ms")
    spec("delivery twice", broken_spec({"fault_tolerance": {"delivery": "twice"}}), needle="delivery")
    spec("an errors connector with a numeric format", broken_spec({"errors": {"format": 5}}))
    spec("spec version 2", broken_spec({"version": 2}))
    spec("steps as a string", broken_spec({"steps": "src"}))
    spec("an empty list of steps", broken_spec({"steps": []}))
    spec("a step that is a number", broken_spec({"steps": [5]}))
    spec("a step without op", broken_spec(steps={1: {"op": ...}}))
    spec("an unknown op", broken_spec(steps={1: {"op": "explode"}}), needle="explode")
    spec("a step without id", broken_spec(steps={1: {"id": ...}}))
    spec("two steps with one id", broken_spec(steps={1: {"id": "src"}}), needle="unique")
    spec("a step id with a space", broken_spec(steps={1: {"id": "a b"}}))
    spec("an unknown field on a step", broken_spec(steps={2: {"size": 10}}), needle="size")
    spec("inputs as a string", broken_spec(steps={1: {"inputs": "src"}}))
    spec("an input naming no step", broken_spec(steps={1: {"inputs": ["nowhere"]}}),
         needle="nowhere")
    spec("a cycle", broken_spec(steps={1: {"inputs": ["win"]}}), needle="cycle")
    spec("a source with an input", broken_spec(steps={0: {"inputs": ["out"]}}))
    spec("a step reading a sink", broken_spec({"steps": [*broken_spec()["steps"], {
        "op": "sink", "id": "after", "inputs": ["out"]}]}), needle="sink")
    for value, what, mp in ((0, "0", False), (5000, "5000", False), ("2", "a string", False),
                            (1.5, "1.5", False), (NAN, "NaN", True)):
        spec(f"parallelism {what}", broken_spec(steps={2: {"parallelism": value}}), mp=mp,
             needle="parallelism")
    spec("a schema that is a list", broken_spec(steps={0: {"schema": ["ts"]}}))
    spec("a schema type that does not exist", broken_spec(steps={0: {"schema": {
        **SCHEMA, "when": "datetime"}}}), needle="datetime")
    spec("a schema type that is a number", broken_spec(steps={0: {"schema": {**SCHEMA, "x": 5}}}))
    spec("an empty schema", broken_spec(steps={0: {"schema": {}}}))
    spec("event_time not in the schema", broken_spec(steps={0: {"event_time": "when"}}),
         needle="event_time")
    spec("event_time of type str", broken_spec(steps={0: {"event_time": "level"}}),
         needle="event_time")
    for value, what, mp in ((-1, "-1", False), (NAN, "NaN", True), (INF, "Infinity", True),
                            (1e300, "1e300", False)):
        spec(f"allowed lateness {what}", broken_spec(steps={0: {"allowed_lateness_ms": value}}),
             mp=mp, needle="allowed_lateness_ms")
    for predicate, what in (("level ==", "cut short"), ("__import__('os')", "__import__"),
                            ("open('x')", "open()"), ("level.lower() == 'x'", "a method call"),
                            ("(lambda: 1)()", "a lambda"), ("abs(" * 150 + "1" + ")" * 150,
                                                            "calls nested 150 deep"),
                            (5, "a number"), ("", "empty")):
        spec(f"a filter predicate: {what}", _filter_spec(predicate))
    spec("a map with both fields and function", broken_spec(steps={1: {
        "op": "map", "fields": {"key": "key", "ts": "ts"}, "function": "tests.udfs:double",
        "key": ...}}), needle="exactly one")
    spec("a map function outside the allowed modules", broken_spec(steps={1: {
        "op": "map", "function": "os:system", "key": ...}}), needle="os:system")
    spec("a map function path that is not one", broken_spec(steps={1: {
        "op": "map", "function": "not a path", "key": ...}}))
    spec("an empty key", broken_spec(steps={1: {"key": ""}}))
    window = 2
    spec("window kind hopping", broken_spec(steps={window: {"kind": "hopping"}}), needle="hopping")
    for value, what, mp in ((0, "0", False), (-1, "-1", False), (NAN, "NaN", True),
                            (INF, "Infinity", True), (1e300, "1e300", False),
                            (10**30, "10**30", False)):
        spec(f"window size {what}", broken_spec(steps={window: {"size_ms": value}}), mp=mp,
             needle="size_ms")
    spec("a sliding window with a slide above its size", broken_spec(steps={window: {
        "kind": "sliding", "size_ms": 100, "slide_ms": 200}}), needle="slide_ms")
    spec("a sliding window with slide 0", broken_spec(steps={window: {
        "kind": "sliding", "size_ms": 100, "slide_ms": 0}}), needle="slide_ms")
    spec("a sliding window of 10^9 windows per event", broken_spec(steps={window: {
        "kind": "sliding", "size_ms": 1_000_000_000, "slide_ms": 1}}), needle="windows")
    spec("a session gap of 0", broken_spec(steps={window: {"kind": "session", "size_ms": None,
                                                     "gap_ms": 0}}), needle="gap_ms")
    spec("a NaN session gap in msgpack", broken_spec(steps={window: {
        "kind": "session", "size_ms": None, "gap_ms": NAN}}), mp=True, needle="gap_ms")
    spec("a window without aggregates", broken_spec(steps={window: {"aggregates": []}}))
    spec("an aggregate fn median", broken_spec(steps={window: {"aggregates": [
        {"name": "m", "fn": "median", "field": "value"}]}}), needle="median")
    spec("a sum without a field", broken_spec(steps={window: {"aggregates": [
        {"name": "s", "fn": "sum"}]}}))
    spec("two aggregates of one name", broken_spec(steps={window: {"aggregates": [
        {"name": "n", "fn": "count"}, {"name": "n", "fn": "count"}]}}))
    spec("an aggregate named key", broken_spec(steps={window: {"aggregates": [
        {"name": "key", "fn": "count"}]}}))
    spec("a window without time_field (none on the source either)", broken_spec(steps={
        0: {"event_time": None}, window: {"time_field": ...}}), needle="time_field")
    spec("a parallel window on an unkeyed stream", broken_spec({"steps": [
        broken_spec()["steps"][0], {**broken_spec()["steps"][window], "inputs": ["src"], "parallelism": 2},
        {**broken_spec()["steps"][3]}]}), needle="key_by")
    src = broken_spec()["steps"][0]
    spec("a join of unkeyed inputs", broken_spec({"steps": [
        src, {**src, "id": "src2"},
        {"op": "join", "id": "j", "inputs": ["src", "src2"], "kind": "tumbling",
         "size_ms": 100, "left_time_field": "ts", "right_time_field": "ts"},
        {"op": "sink", "id": "out", "inputs": ["j"]}]}), needle="keyed")
    spec("a session join", broken_spec({"steps": [
        src, {**src, "id": "src2"},
        {"op": "key_by", "id": "k1", "inputs": ["src"], "key": "key"},
        {"op": "key_by", "id": "k2", "inputs": ["src2"], "key": "key"},
        {"op": "join", "id": "j", "inputs": ["k1", "k2"], "kind": "session",
         "size_ms": 100, "left_time_field": "ts", "right_time_field": "ts"},
        {"op": "sink", "id": "out", "inputs": ["j"]}]}), needle="session")
    spec("a union of one input", broken_spec({"steps": [
        src, {"op": "union", "id": "u", "inputs": ["src"]},
        {"op": "sink", "id": "out", "inputs": ["u"]}]}))
    spec("a source connector with a numeric format", broken_spec(steps={0: {"connector": {
        "format": 5}}}))
    spec("a sink connector with trigger_ms 0", broken_spec(steps={3: {"connector": {
        "format": "json", "trigger_ms": 0}}}), needle="trigger_ms")
    spec("a NaN trigger_ms in msgpack", broken_spec(steps={3: {"connector": {
        "format": "json", "trigger_ms": NAN}}}), mp=True, needle="trigger_ms")
    spec("a step whose output reaches no sink", broken_spec({"steps": [
        *broken_spec()["steps"], {"op": "filter", "id": "lost", "inputs": ["src"],
                            "predicate": "ts > 0"}]}), needle="lost")
    spec("no sink", broken_spec({"steps": broken_spec()["steps"][:3]}), needle="sink")
    spec("1001 steps", broken_spec({"steps": [src] + [
        {"op": "filter", "id": f"f{i}", "inputs": [f"f{i - 1}" if i else "src"],
         "predicate": "ts > 0"} for i in range(1000)] + [
        {"op": "sink", "id": "out", "inputs": ["f999"]}]}))
    spec("a tenant token submitting for another tenant", broken_spec({"tenant": "someone-else"}), 403,
         auth="tenant")
    spec("a tenant token submitting under the victim's name", broken_spec({"name": victim}), 409,
         auth="tenant")
    spec("a different spec under the victim's name", broken_spec({"name": victim}), 409)
    spec("replace=true over the victim with a NaN target", broken_spec(
        {"name": victim, "latency_target_ms": NAN}), mp=True, params=(("replace", "true"),),
         needle="latency_target_ms")
    spec("replace=true over the victim with a function outside the allowed modules",
         broken_spec({"name": victim}, steps={1: {"op": "map", "function": "os:system", "key": ...}}),
         params=(("replace", "true"),), needle="os:system")
    spec("replace=maybe", broken_spec(), params=(("replace", "maybe"),), needle="replace")

    # -- bad updates ---------------------------------------------------------------------------
    def update(description: str, raw: bytes, expect: int | None = 422, *, ctype: str = JSON,
               path: str = flow, auth: str = "admin", needle: str | None = None) -> None:
        cases.append(BadRequest("update", description, "PATCH", path, raw, ctype, auth=auth,
                                expect=expect, needle=needle))

    update("an empty update", _json({}), needle="latency_target_ms")
    for value, what in ((0, "0"), (-5, "-5"), ("30", "a string"), (True, "true"),
                        (1e9, "over a day")):
        update(f"update target {what}", _json({"latency_target_ms": value}),
               needle="latency_target_ms")
    for token in ("NaN", "Infinity", "-Infinity"):
        update(f"update target {token} in JSON", b'{"latency_target_ms": ' + token.encode()
               + b"}", 400, needle=token)
    update("update target 1e999 in JSON (read as Infinity)", b'{"latency_target_ms": 1e999}',
           needle="finite")
    update("update target NaN in msgpack", _mp({"latency_target_ms": NAN}), ctype=MSGPACK,
           needle="finite")
    update("update target Infinity in msgpack", _mp({"latency_target_ms": INF}), ctype=MSGPACK,
           needle="finite")
    update("update weight 0", _json({"weight": 0}), needle="weight")
    update("update weight NaN in msgpack", _mp({"weight": NAN}), ctype=MSGPACK, needle="finite")
    update("update weight Infinity in msgpack", _mp({"weight": INF}), ctype=MSGPACK,
           needle="finite")
    update("update weight 1e300", _json({"weight": 1e300}), needle="weight")
    update("an unknown update field", _json({"target": 5}), needle="target")
    update("an update that is a list", _json([{"weight": 2}]))
    update("an update that is not JSON", b"weight=2", 400)
    update("an update nested 100 deep", _json({"weight": nested(100)}), 400)
    update("an update larger than its limit", _json({"weight": 2, "pad": "x" * max_update_bytes}),
           413)
    update("an update of a dataflow that does not exist", _json({"weight": 2}), 404,
           path="/v1/dataflows/bad-input-nowhere")
    update("an update of the victim by another tenant", _json({"weight": 2}), 404,
           auth="tenant")

    # -- bad paths and query parameters --------------------------------------------------------
    def call(kind: str, description: str, method: str, path: str, expect: int | None, *,
             auth: str = "admin", raw: bytes | None = None,
             params: tuple[tuple[str, str], ...] = ()) -> None:
        cases.append(BadRequest(kind, description, method, path, raw, JSON if raw else None,
                                auth=auth, params=params, expect=expect))

    call("path", "an unknown path", "GET", "/v1/nowhere", 404)
    call("path", "an unknown path under the victim", "GET", f"{flow}/nowhere", 404)
    call("path", "PUT on a dataflow", "PUT", flow, 405, raw=_json(broken_spec()))
    call("path", "POST on a dataflow", "POST", flow, 405, raw=_json(broken_spec()))
    call("path", "a dataflow name of 300 characters", "GET", "/v1/dataflows/" + "n" * 300, 404)
    call("path", "a dataflow name that is a NUL byte", "GET", "/v1/dataflows/%00", 404)
    call("path", "results with limit=0", "GET", f"{flow}/results", None, params=(("limit", "0"),))
    call("path", "results with limit=abc", "GET", f"{flow}/results", None,
         params=(("limit", "abc"),))
    call("path", "results with a cursor of 20,000 characters", "GET", f"{flow}/results", None,
         params=(("cursor", "c" * 20_000),))
    call("path", "a token for a tenant with a space", "POST", "/v1/tokens", 422,
         raw=_json({"tenant": "a b"}))
    call("path", "a token request that is a list", "POST", "/v1/tokens", 422, raw=_json([]))
    call("path", "revoking a token that does not exist", "DELETE", "/v1/tokens/nowhere", 404)

    # -- unknown dataflows and sources ---------------------------------------------------------
    nowhere = "/v1/dataflows/bad-input-nowhere"
    call("dataflow", "status of a dataflow that does not exist", "GET", nowhere, 404)
    call("dataflow", "cancelling a dataflow that does not exist", "DELETE", nowhere, 404)
    call("dataflow", "closing a dataflow that does not exist", "POST", f"{nowhere}/close", 404)
    call("dataflow", "events to a dataflow that does not exist", "POST",
         f"{nowhere}/sources/{source}/events", 404, raw=_json([GOOD_EVENT]))
    call("dataflow", "events to a source the victim does not have", "POST",
         f"{flow}/sources/nowhere/events", 404, raw=_json([GOOD_EVENT]))
    for method, path, what in (("GET", flow, "status of"), ("DELETE", flow, "cancelling"),
                               ("POST", f"{flow}/close", "closing"),
                               ("POST", events, "events to")):
        call("dataflow", f"{what} the victim by another tenant", method, path, 404,
             auth="tenant", raw=_json([GOOD_EVENT]) if path == events else None)

    # -- bad reconfigurations: refused before anything moves -----------------------------------
    def reconfig(description: str, method: str, path: str, raw: bytes | None,
                 expect: int | None = 422, *, auth: str = "admin", needle: str | None = None,
                 params: tuple[tuple[str, str], ...] = ()) -> None:
        cases.append(BadRequest("reconfig", description, method, path, raw,
                                JSON if raw is not None else None, auth=auth, params=params,
                                expect=expect, needle=needle))

    scale, migrate = f"{flow}/scale", f"{flow}/migrate"
    for value, what in ((0, "0"), (True, "true"), ("2", "a string"), (10**30, "10**30"),
                        (1.5, "1.5"), (None, "null")):
        reconfig(f"scale to parallelism {what}", "POST", scale,
                 _json({"step": "out", "parallelism": value}), needle="parallelism")
    reconfig("scale without a step", "POST", scale, _json({"parallelism": 2}), needle="step")
    reconfig("scale with strategy warp", "POST", scale,
             _json({"step": "out", "parallelism": 2, "strategy": "warp"}), needle="strategy")
    reconfig("scale with batch_bins 0", "POST", scale,
             _json({"step": "out", "parallelism": 2, "batch_bins": 0}), needle="batch_bins")
    reconfig("scale with an unknown field", "POST", scale,
             _json({"step": "out", "parallelism": 2, "instances": 2}), needle="instances")
    reconfig("scale with a list body", "POST", scale, _json([{"step": "out"}]))
    reconfig("scale without a body", "POST", scale, b"", 400)
    # Checked by the runtime: the victim has no keyed step (ReconfigError, 422).
    reconfig("scale a step the victim does not have", "POST", scale,
             _json({"step": "bad-input-nowhere", "parallelism": 2}), None)
    reconfig("scale the victim's sink (not a keyed step)", "POST", scale,
             _json({"step": "out", "parallelism": 2}), None)
    reconfig("scale the victim by another tenant", "POST", scale,
             _json({"step": "out", "parallelism": 2}), 404, auth="tenant")
    reconfig("scale a dataflow that does not exist", "POST", "/v1/dataflows/bad-input-nowhere/"
             "scale", _json({"step": "w", "parallelism": 2}), 404)
    reconfig("migrate without saying where to", "POST", migrate, _json({"step": "out"}))
    reconfig("migrate bins to an executor", "POST", migrate,
             _json({"step": "out", "bins": [1], "to_executor": 0}))
    reconfig("migrate bin -1", "POST", migrate,
             _json({"step": "out", "bins": [-1], "to_instance": 0}), needle="bins")
    reconfig("migrate bins as a string", "POST", migrate,
             _json({"step": "out", "bins": "1,2", "to_instance": 0}), needle="bins")
    reconfig("migrate to instance true", "POST", migrate,
             _json({"step": "out", "bins": [1], "to_instance": True}), needle="to_instance")
    reconfig("migrations of a dataflow that does not exist", "GET",
             "/v1/dataflows/bad-input-nowhere/migrations", None, 404)
    reconfig("the victim's migrations by another tenant", "GET", f"{flow}/migrations", None,
             404, auth="tenant")
    for method, path, raw in (("POST", "/v1/pool/rebalance", _json({})),
                              ("POST", "/v1/pool/executors", _json({"count": 1})),
                              ("DELETE", "/v1/pool/executors/0", None)):
        reconfig(f"{method} {path} with a tenant token", method, path, raw, 403, auth="tenant")
    reconfig("rebalance with strategy warp", "POST", "/v1/pool/rebalance",
             _json({"strategy": "warp"}), needle="strategy")
    for value, what in ((0, "0"), (65, "65"), (True, "true"), ("1", "a string")):
        reconfig(f"add {what} executors", "POST", "/v1/pool/executors", _json({"count": value}),
                 needle="count")
    for index in ("-1", "abc", "99999999999999999999"):
        reconfig(f"remove executor {index}", "DELETE", f"/v1/pool/executors/{index}", None,
                 needle="index")
    reconfig("remove executor 0 with strategy warp", "DELETE", "/v1/pool/executors/0", None,
             params=(("strategy", "warp"),), needle="strategy")

    # -- bad scaling requests: refused before the scaling controller hears of them -----------
    scaling, nowhere_scaling = f"{flow}/scaling", "/v1/dataflows/bad-input-nowhere/scaling"

    def scale_with(description: str, data: Any, needle: str | None, expect: int = 422) -> None:
        reconfig(description, "PUT", scaling, _json(data), expect, needle=needle)

    scale_with("scaling without the settings field", {"pin": {}}, "settings")
    scale_with("scaling settings as a list", {"settings": ["ds2"]}, "settings")
    scale_with("scaling policy 5", {"settings": {"policy": 5}}, "policy")
    for key, value, what in (("min_parallelism", 0, "0"), ("max_parallelism", "4", "a string"),
                             ("max_parallelism", True, "true"), ("min_parallelism", 1.5, "1.5"),
                             ("target_utilization", 1.5, "1.5"), ("warmup_s", -1, "-1"),
                             ("catch_up_s", 0, "0"), ("high", 2, "2"), ("lessees", "yes",
                                                                         "a string"),
                             ("max_lessees", -1, "-1")):
        scale_with(f"scaling {key} {what}", {"settings": {key: value}}, key)
    scale_with("a pool-only scaling setting for a dataflow",
               {"settings": {"max_executors": 4}}, "max_executors")
    scale_with("an unknown scaling setting", {"settings": {"speed": "fast"}}, "speed")
    scale_with("an unknown field beside the settings", {"settings": None, "pins": {}}, "pins")
    scale_with("pinning a step to 0 instances", {"settings": None, "pin": {"out": 0}}, "pin")
    scale_with("pinning a step to true", {"settings": None, "pin": {"out": True}}, "pin")
    scale_with("pins as a list", {"settings": None, "pin": ["out"]}, "pin")
    scale_with("pinning a step whose name has a space", {"settings": None, "pin": {"a b": 2}},
               "pin")
    cases.append(BadRequest("reconfig", "scaling high NaN in msgpack", "PUT", scaling,
                            _mp({"settings": {"high": NAN}}), MSGPACK, needle="high"))
    reconfig("scaling without a body", "PUT", scaling, b"", 400)
    reconfig("scaling of a dataflow that does not exist", "PUT", nowhere_scaling,
             _json({"settings": None}), 404)
    reconfig("the scaling of a dataflow that does not exist", "GET", nowhere_scaling, None, 404)
    reconfig("the victim's scaling by another tenant", "GET", scaling, None, 404, auth="tenant")
    reconfig("setting the victim's scaling by another tenant", "PUT", scaling,
             _json({"settings": {"policy": "ds2"}}), 404, auth="tenant")

    # -- bad tokens ----------------------------------------------------------------------------
    for auth in AUTH_HEADERS:
        call("token", f"cancelling the victim with auth {auth!r}", "DELETE", flow, 401,
             auth=auth)
    call("token", "updating the victim without a token", "PATCH", flow, 401, auth="none",
         raw=_json({"weight": 2}))
    call("token", "events to the victim with a wrong token", "POST", events, 401, auth="wrong",
         raw=_json([GOOD_EVENT]))
    call("token", "a spec with a wrong token", "POST", spec_path, 401, auth="wrong",
         raw=_json(broken_spec()))
    for method, path, raw in (("GET", "/v1/tokens", None),
                              ("POST", "/v1/tokens", _json({"tenant": "x"})),
                              ("DELETE", "/v1/tokens/nowhere", None),
                              ("GET", "/v1/executors", None)):
        call("token", f"{method} {path} with a tenant token", method, path, 403, auth="tenant",
             raw=raw)

    # -- events bodies that are not lists of objects -------------------------------------------
    def push(description: str, raw: bytes, expect: int, *, ctype: str = JSON,
             chunked: bool = False, needle: str | None = None) -> None:
        cases.append(BadRequest("events", description, "POST", events, raw, ctype,
                                expect=expect, chunked=chunked, needle=needle))

    for data, what in (({"x": 1}, "an object"), ([1, 2], "a list of numbers"), ("text", "a string"),
                       (None, "null"), ([[GOOD_EVENT]], "a list of lists"),
                       ({"events": "x"}, "events: a string"), ({"events": [1]}, "events: [1]"),
                       ({"events": [GOOD_EVENT], "more": 1}, "events and another field"),
                       ([GOOD_EVENT, 5], "a good event, then a number")):
        push(f"events: {what}", _json(data), 422)
    push("events: a list of numbers in msgpack", _mp([1, 2]), 422, ctype=MSGPACK)
    push("events: msgpack with integer keys", _mp([{1: 2}]), 400, ctype=MSGPACK)
    push("events: bytes that are not msgpack", b"\xc1", 400, ctype=MSGPACK)
    push("events: NaN in JSON", b'[{"ts": 1, "level": "ERROR", "key": "k", "value": NaN}]', 400,
         needle="NaN")
    push("events: Infinity in JSON", b'[{"ts": Infinity}]', 400, needle="Infinity")
    push("events: nested 100 deep", _json([{"ts": 1, "deep": nested(100)}]), 400,
         needle="levels")
    push("events: an empty body", b"", 400)
    push("events: sent as text/plain", _json([GOOD_EVENT]), 415, ctype="text/plain")
    push("events: larger than the limit", b"[" + b" " * max_body_bytes + b"]", 413)
    return cases


# -- the runner ----------------------------------------------------------------------------------
def _headers(case: BadRequest, admin_token: str, tenant_token: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    if case.auth in ("admin", "tenant"):
        headers["Authorization"] = f"Bearer {admin_token if case.auth == 'admin' else tenant_token}"
    elif AUTH_HEADERS[case.auth] is not None:
        headers["Authorization"] = str(AUTH_HEADERS[case.auth])
    if case.content_type is not None and case.body is not None:
        headers["Content-Type"] = case.content_type
    return headers


def _pieces(raw: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(raw), size):
        yield raw[i:i + size]


def send(http: httpx.Client, url: str, case: BadRequest, admin_token: str,
         tenant_token: str) -> httpx.Response:
    """Send one case (its body in pieces, without a length, when it is `chunked`)."""
    content: bytes | Iterator[bytes] | None = case.body
    if case.chunked and case.body is not None:
        content = _pieces(case.body)
    return http.request(case.method, url + case.path, content=content, params=case.params,
                        headers=_headers(case, admin_token, tenant_token))


def _client_address(r: httpx.Response) -> Any:
    stream = r.extensions.get("network_stream")
    return stream.get_extra_info("client_addr") if stream is not None else None


class _Service:
    """The few calls the runner makes with the admin token."""

    def __init__(self, http: httpx.Client, url: str, admin_token: str) -> None:
        self.http, self.url = http, url
        self.auth = {"Authorization": f"Bearer {admin_token}"}

    def get(self, path: str, token: str | None = None) -> Any:
        auth = {"Authorization": f"Bearer {token}"} if token else self.auth
        r = self.http.get(self.url + path, headers=auth)
        r.raise_for_status()
        return r.json()

    def flows(self) -> dict[str, tuple[Any, ...]]:
        """What may not change: each dataflow's tenant, target and state."""
        return {d["name"]: (d["tenant"], d["latency_target_ms"], d["state"])
                for d in self.get("/v1/dataflows")["dataflows"]}

    def victim(self, name: str) -> tuple[Any, ...]:
        s = self.get(f"/v1/dataflows/{name}")
        return s["tenant"], s["state"], s["latency_target_ms"], s["weight"]

    def produces(self, name: str, source: str, event: dict[str, Any], timeout_s: float) -> bool:
        """Whether one good event pushed now becomes a result within `timeout_s`."""
        before = self.get(f"/v1/dataflows/{name}")["results"]
        r = self.http.post(f"{self.url}/v1/dataflows/{name}/sources/{source}/events",
                           json=[event], headers=self.auth)
        if r.status_code != 202:
            return False
        deadline = time.monotonic() + timeout_s
        while self.get(f"/v1/dataflows/{name}")["results"] <= before:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


def probe(url: str, admin_token: str, tenant_token: str, victim: str, *,
          source: str | None = None, good_event: dict[str, Any] | None = None,
          max_spec_bytes: int = 256 * 1024, max_body_bytes: int = 16 * 1024 * 1024,
          http: httpx.Client | None = None, timeout_s: float = 30.0,
          cases: list[BadRequest] | None = None) -> dict[str, Any]:
    """Send every bad request to the service at `url`; say what it answered and what changed.

    Args:
        url: the service's address, e.g. "http://127.0.0.1:8470".
        admin_token: the admin token.
        tenant_token: a token of a tenant that does not own the victim (checked).
        victim: a running dataflow, e.g. `victim_dataflow()`, checked before and after.
        source, good_event: where and what to push to see the victim produce a result
            (default: its first source, GOOD_EVENT).
        max_spec_bytes, max_body_bytes: the service's limits (for the too-large cases).
        http: the client to use (default: a new one; one keep-alive connection throughout).
        timeout_s: how long a good event may take to become a result.
        cases: the requests to send (default: the whole `corpus`).

    Returns:
        {"tried": n, "answered_4xx": k, "non_4xx": ["description: status", ...],
        "unexpected": 4xx answers other than the case expects, or without its needle,
        "harmed": dataflows whose spec or state changed, that appeared, or that stopped
        producing, "connections": distinct connections used (None when unknown),
        "closed_by_server": answers with `Connection: close`, "seconds": the corpus's time}.

    Raises:
        ValueError: the victim is not running, or the tenant token owns it.
        RuntimeError: the victim produces no result to begin with.
    """
    own = http is None
    client = http or httpx.Client(timeout=max(timeout_s, 60.0))
    try:
        svc = _Service(client, url, admin_token)
        tenant, state, _, _ = svc.victim(victim)
        if state != "running":
            raise ValueError(f"victim: expected a running dataflow, got {victim!r} {state}")
        if svc.get("/v1/whoami", tenant_token)["tenant"] == tenant:
            raise ValueError(f"tenant_token: expected a token of a tenant other than the "
                             f"victim's, got one of {tenant!r}; create one for another tenant")
        source = source or svc.get(f"/v1/dataflows/{victim}")["sources"][0]
        event = good_event or GOOD_EVENT
        if not svc.produces(victim, source, event, timeout_s):
            raise RuntimeError(f"the victim {victim!r} produced no result from {event} within "
                               f"{timeout_s} s before the probe; pick a victim that does")
        flows_before, victim_before = svc.flows(), svc.victim(victim)
        todo = cases if cases is not None else corpus(
            victim, source, max_spec_bytes=max_spec_bytes, max_body_bytes=max_body_bytes)
        report: dict[str, Any] = {"tried": 0, "answered_4xx": 0, "non_4xx": [],
                                  "unexpected": [], "harmed": []}
        addresses: set[Any] = set()
        closed = 0
        t0 = time.perf_counter()
        for case in todo:
            report["tried"] += 1
            try:
                r = send(client, url, case, admin_token, tenant_token)
            except httpx.HTTPError as e:
                report["non_4xx"].append(f"{case.description}: no answer ({type(e).__name__}: "
                                         f"{e})")
                continue
            addresses.add(_client_address(r))
            closed += r.headers.get("connection", "").lower() == "close"
            if not 400 <= r.status_code < 500:
                report["non_4xx"].append(f"{case.description}: {r.status_code} {r.text[:200]}")
                continue
            report["answered_4xx"] += 1
            if case.expect is not None and r.status_code != case.expect:
                report["unexpected"].append(f"{case.description}: expected {case.expect}, got "
                                            f"{r.status_code} {r.text[:200]}")
            elif case.needle is not None and case.needle not in r.text:
                report["unexpected"].append(f"{case.description}: the answer does not name "
                                            f"{case.needle!r}: {r.text[:300]}")
        report["seconds"] = round(time.perf_counter() - t0, 3)
        report["connections"] = None if None in addresses else len(addresses)
        report["closed_by_server"] = closed
        report["harmed"] = _harm(svc, flows_before, victim_before, victim, source, event,
                                 timeout_s)
        return report
    finally:
        if own:
            client.close()


def _harm(svc: _Service, flows_before: dict[str, tuple[Any, ...]],
          victim_before: tuple[Any, ...], victim: str, source: str, event: dict[str, Any],
          timeout_s: float) -> list[str]:
    harmed: list[str] = []
    flows_after = svc.flows()
    for name in sorted(set(flows_before) | set(flows_after)):
        before, after = flows_before.get(name), flows_after.get(name)
        if before == after or (name == victim and after is not None):
            continue  # the victim is compared below, weight included
        if before is None:
            harmed.append(f"{name}: created by a bad request (cancelled now)")
            svc.http.delete(f"{svc.url}/v1/dataflows/{name}", headers=svc.auth)
        else:
            harmed.append(f"{name}: (tenant, target, state) {before} -> {after}")
    if victim in flows_after:
        after = svc.victim(victim)
        if after != victim_before:
            harmed.append(f"{victim}: (tenant, state, target, weight) {victim_before} -> {after}")
        elif not svc.produces(victim, source, event, timeout_s):
            harmed.append(f"{victim}: no result within {timeout_s} s of a good event")
    return harmed
