"""The pure layers import with Ray and Spark made unimportable."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'pyspark'):
            raise ImportError(f'{name} is blocked in the pure layers')
sys.meta_path.insert(0, Block())
"""


def test_pure_layers_import_without_ray_or_spark() -> None:
    code = BLOCKER + (
        "import cameo_actors, cameo_actors.dataflow, cameo_actors.operators.build, "
        "cameo_actors.scheduling, cameo_actors.testing\n"
        "assert not any(m.split('.')[0] in ('ray', 'pyspark') for m in sys.modules)\n"
        "print('clean')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "clean"


def test_blocker_really_blocks() -> None:
    run = subprocess.run([sys.executable, "-c", BLOCKER + "import ray\n"],
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert "blocked in the pure layers" in run.stderr
