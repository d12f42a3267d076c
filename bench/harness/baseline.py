"""A baseline commit beside this tree: checked out in a git worktree of its own, run with
this environment's packages (`bench.demo --baseline`, `bench.push_cost --baseline`)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
