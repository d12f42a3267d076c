"""Unit tests run the pure layers only: Ray, Spark and sleeping are blocked."""

from __future__ import annotations

import sys
import time

import pytest


def _no_sleep(*_args: object) -> None:
    raise RuntimeError("unit tests must not sleep: inject a FakeClock and advance() it")


@pytest.fixture(autouse=True)
def _pure(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import ray` raise ImportError inside the test.
    for name in ("ray", "pyspark"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setattr(time, "sleep", _no_sleep)
