"""The executor path's pieces that need no Spark: the part of a group, the switch, and the cost
model's third path (the path itself runs in tests/spark/test_incremental.py)."""

from __future__ import annotations

import datetime

import pytest

from kvstore.errors import InvalidArgument
from spark_sink.ivm.cost import CostModel
from spark_sink.ivm.executor_delta import DELTA_ON_ENV, delta_on, part_of


def test_a_group_has_one_part_in_every_process_and_sql_groups_stay_together():
    assert part_of((1, "a"), 8) == part_of((1, "a"), 8)  # no per-process salt (crc32 of repr)
    assert part_of((-0.0,), 16) == part_of((0.0,), 16)  # one group in SQL: one part
    assert part_of((float("nan"),), 16) == part_of((-float("nan"),), 16)
    parts = {part_of((i,), 8) for i in range(200)}
    assert parts == set(range(8))  # spread over every part
    assert part_of((), 8) == part_of((), 8)  # a one-row view: one part
    # a TIMESTAMP read from Arrow (aware, UTC) and decoded as a row (naive UTC): one part
    aware = datetime.datetime(2020, 1, 1, 12, tzinfo=datetime.UTC)
    assert part_of((aware,), 64) == part_of((aware.replace(tzinfo=None),), 64)


def test_the_switch_is_read_and_a_bad_value_named(monkeypatch):
    monkeypatch.delenv(DELTA_ON_ENV, raising=False)
    assert delta_on() == "auto"
    monkeypatch.setenv(DELTA_ON_ENV, "Executors")
    assert delta_on() == "executors"
    monkeypatch.setenv(DELTA_ON_ENV, "gpu")
    with pytest.raises(InvalidArgument, match="SNAPVIEW_DELTA_ON='gpu'"):
        delta_on()


def test_the_executor_path_takes_over_a_large_change_and_moves_the_break_even():
    m = CostModel()
    m.record_build(20.0)
    for _ in range(4):
        m.record_delta(1_000, 0.15)  # the driver: 100 us a key
        m.record_delta(10_000, 1.05)
    small, large = 1_000, 150_000
    assert m.delta_s(small) < m.executor_delta_s(small)  # a Spark job's fixed cost
    assert m.executor_delta_s(large) < m.delta_s(large)
    assert m.break_even(executors=True) > m.break_even()  # the cheaper delta sets it
    m.record_executor_delta(200_000, 30.0)  # measured: slower than its prior said
    m.record_executor_delta(50_000, 9.0)
    assert m.executor_delta_s(large) > 20.0
    again = CostModel.from_fields({"cost": m.as_field()})
    assert again.executors.points == m.executors.points and again.deltas == m.deltas
    assert "executors" not in CostModel().as_field()  # an older reader's layout is unchanged
