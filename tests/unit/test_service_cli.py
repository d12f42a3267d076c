"""The `cameo` command as a Unix tool: its commands come from the operations table, its
help lists every verb, and output piped into a reader that leaves early (`| head`) ends it
quietly, with only the rows that reached the pipe committed.

In-process against the in-memory service (FastAPI's TestClient, no Ray); the pipe test
runs `main` in a child process whose stdout is a real pipe into `head -3`.
"""

from __future__ import annotations

import doctest
import io
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from cameo_actors.service import cli, paging, transport, verbs
from cameo_actors.service.cli import arguments, output, render
from cameo_actors.service.cli.output import PIPE_CLOSED
from cameo_actors.service.client import Client
from cameo_actors.service.operations import OPERATIONS
from cameo_actors.service.protocol import requests
from tests.shared.service_fakes import Service, flow
from tests.unit.test_service_config import RAY_BLOCKER
from tests.unit.test_service_results import committed, events, parallel_sink

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- the command line, from the table ---------------------------------------------------------------
def test_every_verb_of_the_table_is_a_command_listed_in_the_help() -> None:
    parser = cli.build_parser()
    text = parser.format_help()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for op in OPERATIONS:
        if op.verb is None:
            continue
        assert op.verb.command in choices, op.name
        rows = [o for o in OPERATIONS if o.verb is not None and o.verb.words == op.verb.words]
        assert "cameo " + arguments.usage(op.verb.words, rows) in text, op.name
        command_help = choices[op.verb.command].format_help()
        for i in arguments.inputs(op):  # each input shows in its command's help
            shown = i.metavar if i.positional else i.flag
            assert shown in command_help, (op.name, i.name)
    assert "cameo pool remove INDEX" in text and "cameo submit --check FILE..." in text
    assert "cameo scaling set NAME" in text and "cameo serve" in text


def test_a_commands_options_are_typed_and_described_from_the_models() -> None:
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    scale = choices["scale"].format_help()
    assert "{all_at_once,batched,fluid}" in scale and "(default batched)" in scale
    assert "--batch-bins N" in scale and "the step's new number of instances" in scale
    args = parser.parse_args(["scale", "k", "win", "4", "--batch-bins", "64"])
    assert (args.parallelism, args.batch_bins, args.strategy) == (4, 64, None)
    with pytest.raises(SystemExit):  # a parallelism is a number
        parser.parse_args(["scale", "k", "win", "four"])
    scaling = choices["scaling"].format_help()
    for flag in ("--target-utilization X", "--deadline-aware, --no-deadline-aware",
                 "--pin STEP=N", "--unpin STEP", "--reset"):  # fields, Args and Flags
        assert flag in scaling, flag
    update = parser.parse_args(["update", "a", "--target", "30"])
    assert update.latency_target_ms == 30.0 and update.weight is None


def test_a_verb_without_a_command_of_its_own_prints_its_answer(run_cli: Any) -> None:
    run_cli.client.submit(flow("a"))
    code, out, _ = run_cli("exceptions", "a")
    assert code == 0 and json.loads(out) == {"name": "a", "state": "running", "cause": None,
                                             "exceptions": []}
    code, _, err = run_cli("exceptions", "nope")
    assert code == 1 and "HTTP 404" in err


def test_a_bad_argument_is_refused_naming_it(run_cli: Any) -> None:
    run_cli.client.submit(flow("a"))
    code, _, err = run_cli("pool", "remove", "x")
    assert code == 1 and "INDEX" in err and "'x'" in err
    code, _, err = run_cli("list", "--state", "running", "--json")
    assert code == 0


def test_list_with_detail_shows_each_live_dataflows_figures(run_cli: Any) -> None:
    run_cli.client.submit(flow("a"))
    run_cli.client.push("a", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 3)
    code, out, _ = run_cli("list", "--detail")
    header, row = out.splitlines()
    assert code == 0 and header.split() == ["name", "tenant", "latency_target_ms", "state",
                                            "executors", "p99_ms", "within_target",
                                            "events_in_per_s", "backlog"]
    assert row.split()[:4] == ["a", "ops", "50", "running"] and row.split()[6] == "1"


# -- output into a pipe whose reader leaves ---------------------------------------------------------
class ClosingPipe(io.StringIO):
    """Standard output whose reader leaves after `take` lines: flushing the next fails."""

    def __init__(self, take: int) -> None:
        super().__init__()
        self.take = take

    def flush(self) -> None:
        if self.getvalue().count("\n") > self.take:
            raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize(("instances", "pushed", "take", "kept"), [
    (1, 10, 4, {"a/o/0": 4}),  # one instance: the rows taken are a prefix of its log
    (2, 10, 4, {"a/o/0": 2, "a/o/1": 2}),  # a page of two instances, 5 rows each
    (2, 9, 3, {"a/o/0": 0, "a/o/1": 0}),  # re-read, 3 rows are shared out otherwise: none
    (2, 9, 0, {"a/o/0": 0, "a/o/1": 0}),
])
def test_cameo_results_into_a_closed_pipe_commits_only_the_rows_it_took(
        svc: Service, run_cli: Any, monkeypatch: pytest.MonkeyPatch, instances: int,
        pushed: int, take: int, kept: dict[str, int]) -> None:
    c: Client = run_cli.client
    c.submit(parallel_sink("a", instances))
    c.push("a", "s", events(pushed))
    out = ClosingPipe(take)
    monkeypatch.setattr(sys, "stdout", out)
    code, _, err = run_cli("results", "a", "--json")
    assert code == PIPE_CLOSED and err == ""  # quiet: no message, no traceback
    assert committed(svc, "a") == kept
    taken = [json.loads(line)["event"]["ts"] for line in out.getvalue().splitlines()[:take]]
    left = [r["event"]["ts"] for r in c.results("a")["rows"]]
    assert sorted(left + taken) == list(range(pushed)) or sum(kept.values()) == 0
    assert len(left) == pushed - sum(kept.values())  # nothing taken is lost, nothing else


def test_cameo_results_commits_whole_pages_before_the_pipe_closed(
        svc: Service, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    c: Client = run_cli.client
    c.submit(flow("a"))
    c.push("a", "s", events(30))
    monkeypatch.setattr("cameo_actors.service.cli.commands.DEFAULT_PAGE", 8)  # pages of 8
    monkeypatch.setattr(sys, "stdout", ClosingPipe(19))
    code, _, err = run_cli("results", "a")
    assert code == PIPE_CLOSED and err == ""
    assert committed(svc, "a") == {"a/o/0": 19}  # two whole pages, 3 rows of the third


#: Run in a child process: `cameo results a --json` over the in-memory service, its stdout
#: fd 1 (a pipe into `head -3`) counted line by line, and what was committed then reported.
PIPED = """
import io, json, os, sys
sys.path.insert(0, {root!r})
from tests.shared.service_fakes import ADMIN, Service, flow
from cameo_actors.service import cli

class Counted(io.RawIOBase):
    '''fd 1, counting the lines that went out whole.'''
    lines = 0
    def writable(self):
        return True
    def fileno(self):
        return 1
    def write(self, b):
        n = os.write(1, bytes(b))
        Counted.lines += bytes(b[:n]).count(b"\\n")
        return n

svc = Service()
client = svc.client(ADMIN)
client.submit(flow("a"))
svc.rt.push("a", "s", [{{"ts": i, "level": "ERROR", "key": "k"}} for i in range({rows})])
cli._client = lambda args: client
sys.stdout = io.TextIOWrapper(io.BufferedWriter(Counted()), encoding="utf-8")
try:
    cli.main(["results", "a", "--json"])
except SystemExit as e:
    log = svc.rt.flows["a"]["outputs"].results["a/o/0"]
    left = client.results("a", limit=1)["rows"]
    with open({report!r}, "w") as f:
        json.dump({{"code": e.code, "lines": Counted.lines, "committed": log.committed,
                    "next": left[0]["event"]["ts"] if left else None}}, f)
    raise
"""


@pytest.mark.skipif(shutil.which("head") is None, reason="needs head(1)")
def test_cameo_results_piped_into_head_ends_quietly_with_what_the_pipe_took(
        tmp_path: Any) -> None:
    rows = 20_000  # far more than a pipe holds: the pipe closes while a page is printed
    report = str(tmp_path / "report.json")
    script = RAY_BLOCKER + PIPED.format(root=ROOT, rows=rows, report=report)
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=ROOT)
    head = subprocess.Popen(["head", "-3"], stdin=writer.stdout, stdout=subprocess.PIPE)
    assert writer.stdout is not None and writer.stderr is not None
    writer.stdout.close()  # head holds the pipe's reading end alone
    shown, _ = head.communicate()  # no timeout: its polling would sleep
    err = writer.stderr.read()
    assert writer.wait() == PIPE_CLOSED, err.decode()
    assert err == b""  # no "Broken pipe", no traceback, no "Exception ignored"
    assert [json.loads(line)["event"]["ts"] for line in shown.splitlines()] == [0, 1, 2]
    with open(report) as f:
        got = json.load(f)
    assert got["code"] == PIPE_CLOSED
    # What was committed is exactly what reached the pipe: every line written whole, none
    # left in the process's buffer; the next reader starts right after it.
    assert 3 <= got["committed"] == got["lines"] < rows
    assert got["next"] == got["committed"]


def test_help_piped_into_head_ends_quietly() -> None:
    run = subprocess.run(f"{sys.executable} -m cameo_actors.service.cli --help | head -1",
                         shell=True, capture_output=True, text=True, cwd=ROOT)
    assert run.stdout.startswith("usage: cameo") and run.stderr == ""


def test_the_examples_in_the_modules_run() -> None:
    for module in (verbs, arguments, output, render, transport, paging, requests):
        assert doctest.testmod(module).failed == 0, module.__name__
