"""A baseline commit beside this tree: checked out in a git worktree of its own, run with
this environment's packages (`bench.demo --baseline`, `bench.push_cost --baseline`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness.output import REPO


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


@contextlib.contextmanager
def worktree(rev: str | None) -> Iterator[Path | None]:
    """A detached worktree of commit `rev` for the run (None: no baseline), removed after."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="cameo-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), rev)
        try:
            yield tree
        finally:
            git("worktree", "remove", "--force", str(tree))


def run_child(script: str, args: list[str], tree: Path, timeout_s: float, what: str) -> Any:
    """`python -c script OUT *args` from the source `tree` (this one, or a baseline's
    worktree: its code first on the path, for the child's subprocesses too), which writes
    its figures as JSON to OUT; those figures. `what` names the run in the error."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        proc = subprocess.run([sys.executable, "-c", script, str(out), *args], cwd=tree, env=env,
                              timeout=timeout_s)
        if proc.returncode != 0:
            raise SystemExit(f"{what} exited with {proc.returncode} (its output is above)")
        return json.loads(out.read_text())
