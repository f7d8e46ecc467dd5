"""The incremental engine's cost model (``spark_sink.ivm.cost``): when a delta is cheaper than a
build, from measured epochs and builds (its executor path: test_executor_delta.py)."""

from __future__ import annotations

import pytest

from spark_sink.ivm.cost import PRIOR_PER_KEY_S, CostModel


def test_cost_model_prefers_measurements_and_is_not_fooled_by_tiny_epochs():
    m = CostModel()
    assert m.break_even() > 1_000_000  # no build measured: no build by cost
    m.record_build(4.0)
    for _ in range(5):
        m.record_delta(1, 0.04)  # tiny epochs: all fixed cost
    fixed, per_key = m.fit()
    assert fixed == 0.04 and per_key > PRIOR_PER_KEY_S / 10  # the prior still stands
    assert 5_000 < m.break_even() < 500_000
    for _ in range(16):
        m.record_delta(10_000, 0.04 + 10_000 * 20e-6)  # measured: 20 us a key
    assert m.fit()[1] == pytest.approx(20e-6, rel=0.1)
    assert m.break_even() == pytest.approx((4.0 - 0.04) / 20e-6, rel=0.1)
    again = CostModel.from_fields({"cost": m.as_field()})
    assert again.break_even() == pytest.approx(m.break_even(), rel=0.01)


def test_cost_model_extrapolates_from_two_sizes_by_a_power_law():
    """Measured: 1,000 keys 0.19 s, 10,000 keys 1.05 s (bench_views --crossover); a line would
    put 100,000 keys at ~10 s, the power law near the 4.5 s measured."""
    m = CostModel()
    m.record_build(6.3)
    for _ in range(3):
        m.record_delta(1_000, 0.19)
        m.record_delta(10_000, 1.05)
    a, b = m.power()  # type: ignore[misc]
    assert 0.7 < b < 0.8
    assert 4.0 < m.delta_s(100_000) < 7.0
    assert m.delta_s(100_000) < 0.6 * (m.fit()[0] + m.fit()[1] * 100_000)
    n = m.break_even()
    assert m.delta_s(n) == pytest.approx(6.3, rel=0.01)
