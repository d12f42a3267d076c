"""A benchmark's JSON says what it was measured on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from bench.harness.output import REPO, save_json


def test_the_json_names_the_commit_the_machine_and_the_command(tmp_path: Path) -> None:
    out = tmp_path / "deeper" / "figures.json"
    save_json(str(out), {"eps": 12.5})
    saved = json.loads(out.read_text())
    assert saved["eps"] == 12.5
    on = saved["measured_on"]
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert on["commit"] == head and isinstance(on["dirty"], bool)
    assert on["nproc"] == os.cpu_count() and on["memory_gb"] > 0 and on["cpu_model"]
    assert on["loadavg_1m_end"] >= 0 and on["date"].endswith("+00:00") and on["argv"]


def test_no_path_writes_nothing_and_a_list_is_written_as_it_is(tmp_path: Path) -> None:
    save_json(None, {"eps": 1})
    assert not list(tmp_path.iterdir())
    save_json(str(tmp_path / "rows.json"), [1, 2])
    assert json.loads((tmp_path / "rows.json").read_text()) == [1, 2]
