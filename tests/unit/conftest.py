"""Unit tests run the pure layers only: Ray, Spark and sleeping are blocked."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from tests.shared.service_fakes import Service


def _no_sleep(*_args: object) -> None:
    raise RuntimeError("unit tests must not sleep: inject a FakeClock and advance() it")


@pytest.fixture(autouse=True)
def _pure(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import ray` raise ImportError inside the test.
    for name in ("ray", "pyspark"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setattr(time, "sleep", _no_sleep)


@pytest.fixture()
def svc() -> Iterator[Service]:
    """The real app over an in-memory runtime (tests/shared/service_fakes.py)."""
    s = Service()
    yield s
    s.http.close()
