"""The controller's load samples: rates and costs per dataflow, costs learned per shape."""

from __future__ import annotations

import pytest

from cameo_actors.runtime._private.controller.load import LoadTracker, shape


def spec(name: str, steps: int = 2, rate: float | None = None) -> dict[str, object]:
    return {"name": name, "tenant": name, "latency_target_ms": 100.0,
            "scheduling": {"weight": 1.0, "rate_limit_eps": None, "expected_rate_eps": rate},
            "steps": [{"op": "source", "id": "s"}, *[{"op": "map", "id": f"m{i}", "inputs": ["s"]}
                                                      for i in range(steps - 1)]]}


def test_the_load_tracker_learns_rates_and_costs_per_shape() -> None:
    loads = LoadTracker(window_s=10.0)
    known = {"a": spec("a")}
    for t in range(12):  # 1,000 events/s at 0.2 ms each
        loads.observe(float(t), {"a": {"events_in": 1000 * t, "busy_ms": 200 * t,
                                       "results": 10 * t, "within": 9 * t}}, known)
    (a,) = loads.running([{"name": "a", "spec": known["a"]}])
    assert a.rate_eps == pytest.approx(1000) and a.cost_ms_per_event == pytest.approx(0.2)
    assert a.within_target == pytest.approx(0.9)
    # Another dataflow of the same shape (other names) is predicted at that cost...
    twin = loads.new({**spec("twin", rate=500), "steps": [{"op": "source", "id": "x"},
                                                         {"op": "map", "id": "y", "inputs": ["x"]}]})
    assert shape(spec("twin")) == shape(spec("a"))
    assert twin.rate_eps == 500 and twin.cost_ms_per_event == pytest.approx(0.2)
    # ... one of another shape at the pool's mean cost per event and step ...
    other = loads.new(spec("other", steps=4, rate=100))
    assert other.cost_ms_per_event == pytest.approx(0.1 * 4)
    # ... and one without a rate (none declared, no rate limit) has an unknown demand.
    assert loads.new(spec("quiet")).rate_eps is None


def test_counters_that_restart_start_the_measure_over_and_gone_dataflows_are_forgotten() -> None:
    loads = LoadTracker(window_s=10.0)
    known = {"a": spec("a")}
    for t in range(3):
        loads.observe(float(t), {"a": {"events_in": 100 * t, "busy_ms": 10 * t}}, known)
    loads.observe(3.0, {"a": {"events_in": 5, "busy_ms": 1}}, known)  # restored elsewhere
    assert loads.running([{"name": "a", "spec": known["a"]}])[0].rate_eps is None
    loads.observe(4.0, {}, known)
    assert loads.running([{"name": "a", "spec": known["a"]}])[0].rate_eps is None
