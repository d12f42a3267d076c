"""The scenarios' tenant mixes (`bench.mixes`): what a seed draws, and the dataflows and
workloads each tenant becomes."""

from __future__ import annotations

import pytest

from bench import mixes


def test_a_seed_draws_the_same_mix_and_each_mix_is_a_valid_near_capacity_load() -> None:
    seen = set()
    for seed in range(40):
        tenants, load = mixes.random_mix(seed)
        assert (tenants, load) == mixes.random_mix(seed)
        assert mixes.RANDOM_LOADS[0] <= load <= mixes.RANDOM_LOADS[1]
        sensitive = [t for t in tenants if t.sensitive]
        bulk = [t for t in tenants if not t.sensitive]
        assert 1 <= len(sensitive) <= 3 and 1 <= len(bulk) <= 3
        assert len({t.name for t in tenants}) == len(tenants)
        assert all(20 <= t.target_ms <= 300 and 200 <= t.rate_eps <= 800 for t in sensitive)
        assert all(1000 <= t.target_ms <= 6000 and t.weight in (1, 2, 3) for t in bulk)
        seen.add(tuple(t.kind for t in tenants))
    assert len(seen) > 10  # the seeds draw different shapes


def test_each_tenant_becomes_a_dataflow_of_its_own_and_bulk_shares_the_bulk_rate() -> None:
    loads = mixes.loads(mixes.ISSUE_MIX, 10_000.0)
    assert [ld.name for ld in loads] == [t.name for t in mixes.ISSUE_MIX]
    for ld, t in zip(loads, mixes.ISSUE_MIX, strict=True):
        spec = ld.flow.spec
        assert spec.tenant == t.name and spec.latency_target_ms == t.target_ms
        assert ld.latency_sensitive == t.sensitive
        assert ld.workload.rate_eps == (5_000.0 if t.kind == "bulk" else t.rate_eps)
    kinds = {t.kind: [s.OP for s in ld.flow.spec.steps] for t, ld in zip(mixes.ISSUE_MIX, loads, strict=True)}
    assert kinds["window"][-2:] == ["window", "sink"] and "filter" in kinds["filter"]
    with pytest.raises(ValueError, match="kind must be one of"):
        mixes.Tenant("x", "join", 10.0)
