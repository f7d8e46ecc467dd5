"""Aggregate deltas against the reference: per group (NULL keys one group, NaN one group,
-0.0 with 0.0) the deltas of COUNT(*), SUM(x) and COUNT(x); folding is linear (the deltas of
a + b are those of a added to those of b, through ``add_group_deltas``); exact sums never
wrap; a fold that ignores weights is caught."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.aggregate import AggregateSpec, add_group_deltas, fold_changes
from spark_sink.ivm.ops.zset import ArrowZSet, WeightOverflow
from tests.unit.ivm_ops.zsets import LEFT, SETTINGS, arrow, caught, counter, left_rows, rows_counter

# (spec, group key positions, summed column positions) over LEFT (k, v, f, s)
SPECS = [
    (AggregateSpec(("k", "s"), ("v",)), [0, 3], [1]),
    (AggregateSpec(("f",), ("v", "k")), [2], [1, 0]),
    (AggregateSpec((), ("v",)), [], [1]),
]


@pytest.mark.parametrize("i", range(len(SPECS)))
@SETTINGS
@given(left_rows)
def test_fold_equals_the_reference(i, rw):
    spec, group, sums = SPECS[i]
    got = fold_changes(spec, arrow(LEFT, rw))
    assert got.schema.names == [*spec.group_by, *spec.delta_columns()]
    assert rows_counter(got) == ref.aggregate(counter(rw), group, sums)


@pytest.mark.parametrize("i", range(len(SPECS)))
@SETTINGS
@given(left_rows, left_rows)
def test_fold_is_linear(i, a, b):
    spec = SPECS[i][0]
    za, zb = arrow(LEFT, a), arrow(LEFT, b)
    added = add_group_deltas(spec, fold_changes(spec, za), fold_changes(spec, zb))
    assert rows_counter(added) == rows_counter(fold_changes(spec, za + zb))


def test_sums_are_exact_and_never_wrap():
    spec = AggregateSpec(("k",), ("v",))
    # x * w leaves int64, the group's sum does not: exact through DECIMAL(38,0)
    z = ArrowZSet.from_rows(LEFT, [(1, 2**62, None, None), (1, 2**62 - 1, None, None)], [4, -4])
    assert fold_changes(spec, z).to_pylist() == [
        {"k": 1, "__count": 0, "__sum_v": 4, "__nonnull_v": 0}
    ]
    # the group's sum leaves BIGINT: refused, naming the column
    big = ArrowZSet.from_rows(LEFT, [(1, 2**62, None, None)] * 2, [1, 1])
    with pytest.raises(WeightOverflow, match="__sum_v"):
        fold_changes(spec, big)
    # a stored sum plus a delta that leaves BIGINT: Spark ANSI's ARITHMETIC_OVERFLOW
    half = fold_changes(spec, ArrowZSet.from_rows(LEFT, [(1, 2**62, None, None)], [1]))
    with pytest.raises(WeightOverflow, match="__sum_v"):
        add_group_deltas(spec, half, half)


def test_non_integral_sums_are_refused():
    with pytest.raises(TypeError, match="integers only"):
        fold_changes(AggregateSpec(("k",), ("f",)), ArrowZSet.empty(LEFT))


def test_planted_fault_ignoring_weights_is_caught():
    spec, group, sums = SPECS[0]

    def counts_rows(rw):
        # the fault: every changed row counted +1, a deletion as if it were an insertion
        data = arrow(LEFT, rw).data
        got = fold_changes(spec, ArrowZSet.from_table(data, pa.array([1] * len(data), pa.int64())))
        return rows_counter(got) != ref.aggregate(counter(rw), group, sums)

    _, weights = caught(left_rows, counts_rows)
    assert any(w != 1 for w in weights)
