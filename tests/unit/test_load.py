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


def cpu(at: float, process: float, worker: float, host_busy: float | None, host: str = "h",
        cores: int = 2) -> dict[str, object]:
    return {"at_s": at, "process_ms": process, "worker_ms": worker, "host": host,
            "cores": cores, "host_busy_ms": host_busy}


def test_costs_are_the_operators_cpu_per_event_and_the_calls_cpu_per_second() -> None:
    loads = LoadTracker(window_s=10.0)
    known = {"small": spec("small"), "bulk": spec("bulk", steps=3)}
    for t in range(6):
        # small: 500 events/s, 200 ms/s of CPU, 150 of it its calls'; bulk: 10,000
        # events/s, 520 ms/s of CPU, 20 of it its calls'
        loads.observe(float(t), {
            "small": {"events_in": 500 * t, "busy_ms": 50 * t, "cpu_ms": 200 * t,
                      "calls_cpu_ms": 150 * t},
            "bulk": {"events_in": 10_000 * t, "busy_ms": 900 * t, "cpu_ms": 520 * t,
                     "calls_cpu_ms": 20 * t}}, known)
    small, bulk = loads.running([{"name": n, "spec": known[n]} for n in ("small", "bulk")])
    assert small.cost_ms_per_event == pytest.approx(0.1)
    assert small.calls_ms_per_s == pytest.approx(150) and small.calls_share == 0.75
    assert small.demand_ms_per_s == pytest.approx(200)
    assert bulk.cost_ms_per_event == pytest.approx(0.05) and bulk.calls_ms_per_s == 20
    # A twin of small at twice the rate: its events cost twice as much, its calls the same
    # (a client calls once per period: a higher rate brings larger calls, not more).
    twin = loads.new({**spec("twin", rate=1000)})
    assert twin.cost_ms_per_event == pytest.approx(0.1) and twin.calls_ms_per_s == 150
    assert twin.demand_ms_per_s == pytest.approx(250)
    # A new shape: the pool's mean operators' cost per event and step (weighted by rate),
    # and its mean calls' CPU per dataflow.
    other = loads.new(spec("other", steps=4, rate=100))
    per_step = (50 + 500) / (500 * 2 + 10_000 * 3)
    assert other.cost_ms_per_event == pytest.approx(per_step * 4)
    assert other.calls_ms_per_s == pytest.approx((150 + 20) / 2)


def test_a_dataflow_whose_events_stopped_demands_nothing_at_its_shapes_cost() -> None:
    loads = LoadTracker(window_s=10.0)
    known = {"a": spec("a")}
    for t in range(3):
        loads.observe(float(t), {"a": {"events_in": 100 * t, "cpu_ms": 30 * t,
                                       "calls_cpu_ms": 10 * t}}, known)
    for t in range(3, 20):  # nothing comes any more: no calls either
        loads.observe(float(t), {"a": {"events_in": 200, "cpu_ms": 60,
                                       "calls_cpu_ms": 20}}, known)
    (a,) = loads.running([{"name": "a", "spec": known["a"]}])
    assert a.rate_eps == 0 and a.cost_ms_per_event == pytest.approx(0.2)
    assert a.calls_ms_per_s == 0 and a.demand_ms_per_s == 0


def test_capacity_is_the_hosts_cores_less_other_processes_at_most_a_core_per_worker() -> None:
    loads = LoadTracker(window_s=10.0)
    for t in range(11):
        # two executors on a 2-core host: each 600 ms/s of CPU, 400 of it the worker
        # thread's; the host busy 1,700 ms/s: other processes take 500 of it
        loads.observe(float(t), {}, {}, {i: cpu(float(t), 600.0 * t, 400.0 * t, 1700.0 * t)
                                        for i in (0, 1)})
    capacity, basis = loads.capacity([0, 1])
    assert capacity == pytest.approx(2000 - 500)
    assert "2 on a host of 2 cores, 500 ms/s of them taken by other processes" in basis
    # on a host of 16 cores, each executor's worker thread is one core at most
    big = LoadTracker(window_s=10.0)
    for t in range(3):
        big.observe(float(t), {}, {}, {0: cpu(float(t), 600.0 * t, 400.0 * t, 700.0 * t,
                                              cores=16)})
    assert big.capacity([0])[0] == pytest.approx(1000 + 200)
    # an executor not measured yet counts 1,000 ms/s, and a new process starts over
    assert big.capacity([0, 7])[0] == pytest.approx(1200 + 1000)
    big.observe(3.0, {}, {}, {0: cpu(3.0, 5.0, 1.0, 2200.0, cores=16)})
    capacity, basis = big.capacity([0])
    assert capacity == 1000.0 and "not measured yet" in basis


def test_processes_busy_beside_idle_executors_leave_them_their_fair_share_of_the_cores() -> None:
    loads = LoadTracker(window_s=10.0)
    for t in range(3):  # idle executors; others keep 1,700 ms/s of the 2 cores busy
        loads.observe(float(t), {}, {}, {i: cpu(float(t), 20.0 * t, 5.0 * t, 1740.0 * t)
                                        for i in (0, 1)})
    # two busy threads beside two worker threads: half the cores each way, not 300 ms/s
    assert loads.capacity([0, 1])[0] == pytest.approx(1000.0)
