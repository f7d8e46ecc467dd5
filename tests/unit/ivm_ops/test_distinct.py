"""COUNT(DISTINCT x) per group and SELECT DISTINCT against the reference (a value counts while
its count is positive, NULLs not counted; a row is in SELECT DISTINCT while its weight sum is
positive; NaN one value, -0.0 with 0.0), and both delta rules over histories of the input with
the state carried: each step's rule equals the change of the whole operator, and the carried
output equals the reference at the end. Planted faults: a COUNT(DISTINCT) that counts weights
instead of values, and a SELECT DISTINCT that keeps rows of negative weight; both caught."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.distinct import (
    count_distinct,
    count_distinct_delta,
    distinct_delta,
    select_distinct,
)
from spark_sink.ivm.ops.values import ValuesSpec, build_state, fold_values, present, value_change
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet
from tests.unit.ivm_ops import zsets as zs

# (spec, group positions, value position) over LEFT (k, v, f, s)
SPECS = [
    (ValuesSpec(("k",), "v", "n"), [0], 1),
    (ValuesSpec(("s",), "f", "n"), [3], 2),
    (ValuesSpec((), "s", "n"), [], 3),
]


def ref_count(i, c):
    _, group, value = SPECS[i]
    return ref.count_distinct(c, group, value)


@pytest.mark.parametrize("i", range(len(SPECS)))
@zs.SETTINGS
@given(zs.left_rows)
def test_count_distinct_equals_the_reference(i, rw):
    got = count_distinct(SPECS[i][0], zs.arrow(zs.LEFT, rw))
    assert got.schema.names == [*SPECS[i][0].group_by, "n"]
    assert zs.rows_counter(got) == ref_count(i, zs.counter(rw))


@pytest.mark.parametrize("i", range(len(SPECS)))
@zs.STEPS
@given(zs.histories(zs.left_bags))
def test_the_count_distinct_delta_rule_follows_a_history(i, history):
    spec = SPECS[i][0]
    exact, carried = zs.follow(
        history,
        zs.LEFT,
        lambda z: count_distinct(spec, z),
        lambda z: build_state(spec, z),
        lambda s, ch: fold_values(s, value_change(spec, ch)),
        lambda s, ch: count_distinct_delta(spec, s, ch),
    )
    assert exact
    assert carried.to_counter() == ref_count(i, zs.counter(history[-1]))


@zs.SETTINGS
@given(zs.left_rows)
def test_select_distinct_equals_the_reference(rw):
    assert select_distinct(zs.arrow(zs.LEFT, rw)).to_counter() == ref.select_distinct(
        zs.counter(rw)
    )


@zs.STEPS
@given(zs.histories(zs.left_bags))
def test_the_select_distinct_delta_rule_follows_a_history(history):
    exact, carried = zs.follow(
        history,
        zs.LEFT,
        select_distinct,
        lambda z: z.consolidate(),
        lambda s, ch: (s + ch).consolidate(),
        distinct_delta,
    )
    assert exact
    assert carried.to_counter() == ref.select_distinct(zs.counter(history[-1]))


@zs.SETTINGS
@given(zs.left_rows, zs.left_rows)
def test_the_select_distinct_delta_rule_holds_for_any_zsets(a, b):
    old, change = zs.arrow(zs.LEFT, a), zs.arrow(zs.LEFT, b)
    want = ref.add(
        ref.select_distinct(ref.add(zs.counter(a), zs.counter(b))),
        ref.neg(ref.select_distinct(zs.counter(a))),
    )
    assert distinct_delta(old, change).to_counter() == want


def test_planted_fault_counting_weights_is_caught():
    spec, group, value = SPECS[0]

    def counts_weights(rw):
        # the fault: the group's positive counts summed (copies counted) instead of its values
        t = present(build_state(spec, zs.arrow(zs.LEFT, rw)))
        w = pc.if_else(pc.is_valid(t["v"]), t[WEIGHT], 0)
        t = t.set_column(t.num_columns - 1, WEIGHT, w)
        got = t.group_by(["k"], use_threads=False).aggregate([(WEIGHT, "sum")])
        return zs.rows_counter(got) != ref.count_distinct(zs.counter(rw), group, value)

    _, weights = zs.caught(zs.left_rows, counts_weights)
    assert any(abs(w) > 1 for w in weights) or len(weights) > 1


def test_planted_fault_keeping_negative_rows_is_caught():
    def nonzero(rw):
        # the fault: a row present while its weight sum is nonzero, not positive
        c = zs.arrow(zs.LEFT, rw).consolidate()
        ones = pa.array([1] * len(c), pa.int64())
        got = ArrowZSet(c.table.set_column(c.table.num_columns - 1, WEIGHT, ones))
        return got.to_counter() != ref.select_distinct(zs.counter(rw))

    _, weights = zs.caught(zs.left_rows, nonzero)
    assert any(w < 0 for w in weights)
