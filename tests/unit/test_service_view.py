"""The CLI's status screen, tables and spec loading (pure text and files)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from cameo_actors import Dataflow
from cameo_actors.service import cli
from cameo_actors.service.cli import load_specs, read_events
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.view import (
    UtcIsoFormatter,
    iso_time,
    latency_bar,
    render_status,
    render_table,
)
from tests.shared.service_fakes import ADMIN, SCHEMA, Service, flow


def status(p99: float | None) -> dict[str, Any]:
    return {"name": "alerts", "tenant": "ops", "state": "running", "latency_target_ms": 50,
            "weight": 1.0, "latency": {"p50_ms": 10.0, "p95_ms": 30.0, "p99_ms": p99,
                                        "max_ms": 90.0, "mean_ms": 12.0},
            "within_target": 0.97, "results": 12345, "events_in": 50000, "events_out": 12345,
            "throughput": {"events_in_per_s": 1000.0, "events_out_per_s": 250.0,
                           "results_per_s": 250.0, "window_s": 2.0},
            "backlog": 7, "errors": {"logs:malformed": 3}, "failures": [], "executors": [0, 1],
            "sources": ["logs"], "submitted_at": 1.0}


def test_status_frame_shows_percentiles_against_the_target() -> None:
    text = render_status(status(61.0), now=0)
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "10.0 ms" in lines["p50"] and lines["p50"].rstrip().endswith("ok")
    assert "61.0 ms" in lines["p99"] and lines["p99"].rstrip().endswith("OVER")
    assert "target 50 ms" in text and "97.0 %" in text and "12,345 results" in text
    assert "in 1,000.0 ev/s" in text and "backlog 7" in text and "logs:malformed 3" in text
    assert "\x1b[" not in text  # no colour unless asked
    assert "\x1b[31mOVER" in render_status(status(61.0), color=True, now=0)


def test_status_frame_without_results() -> None:
    s = status(None)
    s["latency"] = dict.fromkeys(s["latency"])
    s["within_target"] = None
    text = render_status(s, now=0)
    assert "within target -" in text and "OVER" not in text


def test_latency_bar_marks_the_target_in_the_middle() -> None:
    assert latency_bar(50, 50, 10) == "[#####|    ] "
    assert latency_bar(0, 50, 10) == "[     |    ] "
    assert latency_bar(None, 50, 10) == "[     |    ] "
    assert latency_bar(101, 50, 10) == "[#####|####]>"


def test_table() -> None:
    text = render_table([{"name": "a", "executors": [0, 1], "t": 1.5}, {"name": "bb", "t": None}],
                        ["name", "executors", "t"])
    assert text.splitlines() == ["name  executors  t", "a     0,1        1.5", "bb    -          -"]


def test_load_specs_from_python_and_json_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    py = tmp_path / "flows.py"
    py.write_text(
        "from cameo_actors import Dataflow\n"
        "a = Dataflow('a', latency_target_ms=5).source('s', schema={'x': 'int'}).sink('o')\n"
        "b = Dataflow('b', latency_target_ms=9).source('s', schema={'x': 'int'}).sink('o')\n"
        "both = [a, b]\n")
    assert [s["name"] for s in load_specs(str(py))] == ["a", "b"]
    js = tmp_path / "specs.json"
    js.write_text(json.dumps([{"name": "c"}, {"name": "d"}]))
    assert [s["name"] for s in load_specs(str(js))] == ["c", "d"]
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ConfigError, match="Dataflow objects"):
        list(load_specs(str(empty)))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="invalid JSON"):
        list(load_specs(str(broken)))


def test_read_events_json_lines_or_list(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lines = tmp_path / "e.jsonl"
    lines.write_text('{"x": 1}\n\n{"x": 2}\n')
    assert read_events(str(lines)) == [{"x": 1}, {"x": 2}]
    listed = tmp_path / "e.json"
    listed.write_text('[{"x": 3}]')
    assert read_events(str(listed)) == [{"x": 3}]


def test_times_show_as_iso_8601_in_utc() -> None:
    assert iso_time(0) == "1970-01-01T00:00:00Z"
    assert iso_time(1_700_000_000.9) == "2023-11-14T22:13:20Z"  # to the second, not rounded up
    assert iso_time(None) == "-"
    text = render_status(status(61.0), now=1_700_000_000)
    assert text.splitlines()[0].endswith("2023-11-14T22:13:20Z")
    assert "submitted 1970-01-01T00:00:01Z" in text  # status()'s submitted_at is 1.0
    rows = [{"id": "t1", "created": 86_400.5, "ended_at": 0, "n": 3.0},
            {"id": "t2", "created": None, "ended_at": True}]
    assert render_table(rows, ["id", "created", "ended_at", "n"]).splitlines() == [
        "id  created               ended_at              n",
        "t1  1970-01-02T00:00:00Z  1970-01-01T00:00:00Z  3",
        "t2  -                     True                  -"]  # a flag is not a time
    log = UtcIsoFormatter("%(asctime)s cameo %(levelname)s %(message)s")  # `cameo serve`'s log
    record = logging.makeLogRecord({"msg": "up", "levelname": "INFO", "created": 1_700_000_000.25,
                                    "msecs": 250.0})
    assert log.format(record) == "2023-11-14T22:13:20.250Z cameo INFO up"


def run_cli(svc: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *argv: str) -> tuple[int, str, str]:
    """A `cameo` command against the in-memory service: (exit code, stdout, stderr)."""
    monkeypatch.setattr(cli, "_client", lambda _args: svc.client(ADMIN))
    args = cli.build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cancel_goes_through_every_name_and_fails_if_any_failed(
        svc: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    admin = svc.client(ADMIN)
    admin.submit(flow("a"))
    admin.submit(flow("c"))
    code, out, err = run_cli(svc, monkeypatch, capsys, "cancel", "a", "nope", "c")
    assert code == 1
    assert out.splitlines() == ["a: cancelled (0 queued messages dropped)",
                                "c: cancelled (0 queued messages dropped)"]  # past the bad name
    assert "cameo: nope: not cancelled: no dataflow named 'nope'" in err
    assert "HTTP 404" in err and "cameo list" in err  # what arrived and the fix
    assert "1 of 3 dataflows not cancelled" in err
    admin.submit(flow("d"))
    assert run_cli(svc, monkeypatch, capsys, "cancel", "d")[0] == 0


def test_token_list_shows_iso_times_and_json_keeps_the_number(
        svc: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    made = svc.client(ADMIN).create_token("ops")
    code, out, _ = run_cli(svc, monkeypatch, capsys, "token", "list")
    header, row = out.splitlines()
    assert code == 0 and header.split() == ["id", "tenant", "created"]
    assert row.split() == [made["id"], "ops", iso_time(made["created"])]
    _, out, _ = run_cli(svc, monkeypatch, capsys, "token", "list", "--json")
    assert json.loads(out) == [{"id": made["id"], "tenant": "ops", "created": made["created"]}]


def test_submit_check_and_the_pools_status_say_who_would_miss(
        svc: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Any) -> None:
    def spec(name: str, rate: float) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(Dataflow(name, latency_target_ms=100, tenant=name, expected_rate_eps=rate)
                        .source("s", schema=SCHEMA).sink("o").spec.to_json())
        return str(path)

    code, out, _ = run_cli(svc, monkeypatch, capsys, "submit", "--check", spec("small", 1000))
    assert code == 0 and out.startswith("small: every target is predicted to be met")
    assert "small (new) (tenant small): meets" in out and svc.rt.deploys == 0
    assert run_cli(svc, monkeypatch, capsys, "submit", spec("hog", 150_000))[0] == 0
    code, out, _ = run_cli(svc, monkeypatch, capsys, "submit", "--check", spec("late", 150_000))
    assert code == 1 and "some targets are predicted to be missed" in out
    assert "late (new) (tenant late): misses: needs 1,500 ms/s" in out
    assert "needed: about 4 executors" in out and "late fits at up to" in out
    code, _, err = run_cli(svc, monkeypatch, capsys, "submit", spec("late", 150_000))
    assert code == 0 and "cameo: warning: predicted to miss its target: hog:" in err
    code, out, _ = run_cli(svc, monkeypatch, capsys, "status")
    assert code == 0 and "hog (tenant hog): misses" in out
    assert "load above the weighted share: hog 500 ms/s, late 500 ms/s" in out
    code, out, _ = run_cli(svc, monkeypatch, capsys, "status", "hog", "--once")
    assert "outlook     misses: needs 1,500 ms/s" in out
