"""bench.admission's reading of a prediction: the forecast bulk rates, and its table."""

from __future__ import annotations

import pytest

from bench import admission
from bench.tables import admission as admission_table
from cameo_actors.scheduling.admission import Demand, predict


def test_a_forecast_is_the_base_plus_what_the_new_tenant_may_send() -> None:
    # bulk-1s at 1,000 events/s and 0.2 ms each, a small tenant at 100 ms/s: 300 of 1,000
    running = [Demand("bulk-1s", "b", 1.0, 1000.0, 1000.0, 0.2),
               Demand("small", "s", 1.0, 50.0, 500.0, 0.2)]
    p = predict(1000.0, running, Demand(admission.NEW, admission.NEW, 1.0, 2000.0, None, 0.2))
    got = admission._answer(p.to_dict(), 1000.0)
    assert got["utilization"] == pytest.approx(0.3) and got["bulk_cost_ms"] == pytest.approx(0.2)
    assert got["at_risk_eps"] == pytest.approx(1000 + (900 - 300) / 0.2)
    # it fits at what the others leave it (given 99% of its demand is not a miss)
    assert got["fits_eps"] == pytest.approx(1000 + 700 / 0.2 / 0.99, abs=0.1)  # rounded down
    row = {"bulk_alone_eps": 20_000.0, "sustainable": {"eps": 4_000.0}, "cpu": got, "busy": got}
    lines = admission_table.table({"base": 0.12, "rounds": [row]})
    assert "| 1 | 20,000 | 4,000 |" in lines[2] and lines[2].endswith("| 4,535 | 1.13x |")


def test_a_forecast_prices_the_new_tenants_calls_per_second_as_bulks() -> None:
    # bulk-1s: 1,000 events/s at 0.2 ms each plus 100 ms/s of calls; small: 100 ms/s
    running = [Demand("bulk-1s", "b", 1.0, 1000.0, 1000.0, 0.2, calls_ms_per_s=100.0),
               Demand("small", "s", 1.0, 50.0, 500.0, 0.2)]
    new = Demand(admission.NEW, admission.NEW, 1.0, 2000.0, None, 0.2, calls_ms_per_s=100.0)
    got = admission._answer(predict(1000.0, running, new).to_dict(), 1000.0)
    assert got["bulk_cost_ms"] == pytest.approx(0.2)
    assert got["bulk_calls_ms_per_s"] == pytest.approx(100.0)
    # 900 of headroom less 400 running less the new tenant's calls, at 0.2 ms per event
    assert got["at_risk_eps"] == pytest.approx(1000 + (900 - 400 - 100) / 0.2)
    rows = admission_table.table({"base": 0.12, "rounds": [
        {"bulk_alone_eps": 20_000.0, "sustainable": {"eps": 4_000.0}, "cpu_calls": got,
         "cpu": got, "busy": got}]})
    assert sum("| 1 | 20,000 | 4,000 |" in line for line in rows) == 3
