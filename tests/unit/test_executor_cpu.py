"""The executor's CPU charged to its dataflows: the worker thread's by busy time, the rest
of the process's (receiving calls) by calls."""

from __future__ import annotations

import doctest

import pytest

from cameo_actors.runtime._private.executor import cpu
from cameo_actors.runtime._private.executor.cpu import CpuAccount, host_cpu


def test_the_worker_s_cpu_goes_by_busy_time_and_the_rest_by_calls() -> None:
    acct = CpuAccount()
    acct.charge(1000.0, 500.0, {"bulk": 100.0, "small": 0.0}, {"bulk": 5, "small": 0})
    # bulk: 90% of the busy time, 1 call in 10; the process spent 300 ms, 100 off the worker
    charged = acct.charge(1300.0, 700.0, {"bulk": 280.0, "small": 20.0}, {"bulk": 6, "small": 9})
    assert charged["bulk"] == pytest.approx((0.9 * 200 + 0.1 * 100, 0.1 * 100))
    assert charged["small"] == pytest.approx((0.1 * 200 + 0.9 * 100, 0.9 * 100))
    # cumulative; without calls meanwhile the rest goes by busy time too
    again = acct.charge(1400.0, 750.0, {"bulk": 330.0, "small": 20.0}, {"bulk": 6, "small": 9})
    assert again["bulk"] == pytest.approx((190 + 100, 10 + 50))
    assert again["small"] == pytest.approx(charged["small"])


def test_a_dataflow_gone_is_forgotten_and_a_new_one_starts_at_zero() -> None:
    acct = CpuAccount()
    acct.charge(0.0, 0.0, {"a": 0.0}, {"a": 0})
    acct.charge(100.0, 50.0, {"a": 10.0}, {"a": 1})
    charged = acct.charge(200.0, 100.0, {"b": 500.0}, {"b": 40})
    assert charged == {"b": (0.0, 0.0)}  # its counters so far are the mark, not a charge
    assert acct.charge(300.0, 150.0, {"b": 510.0}, {"b": 41})["b"] == pytest.approx((100.0, 50.0))


def test_nothing_is_charged_when_nothing_ran() -> None:
    acct = CpuAccount()
    acct.charge(0.0, 0.0, {"a": 0.0}, {"a": 0})
    assert acct.charge(25.0, 3.0, {"a": 0.0}, {"a": 0}) == {"a": (0.0, 0.0)}


def test_this_host_s_cpu_is_read() -> None:
    now = host_cpu(12.5, clock=lambda: 7.0)
    assert now["at_s"] == 7.0 and now["worker_ms"] == 12.5 and now["process_ms"] > 0
    assert now["cores"] >= 1 and now["host"]
    assert now["host_busy_ms"] is None or now["host_busy_ms"] > 0


def test_docstring_examples_run() -> None:
    assert doctest.testmod(cpu).failed == 0
