"""MIN/MAX per group against the reference (NULLs ignored, an all-NULL group NULL, an emptied
group gone, a global aggregate's one row; NaN above every value as Spark orders it; -0.0 one
value with 0.0), and the delta rule over histories of the input with the multiset state carried:
each step's rule equals the change of the whole aggregate, and the carried output equals the
reference at the end. Planted fault: a state fold that forgets deletions (so a deleted MIN
lingers), which the harness must catch."""

from __future__ import annotations

import math

import pyarrow.compute as pc
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.minmax import MinMaxSpec, minmax, minmax_delta
from spark_sink.ivm.ops.values import build_state, fold_values, value_change
from spark_sink.ivm.ops.zset import ArrowZSet
from tests.unit.ivm_ops.zsets import (
    LEFT,
    SETTINGS,
    STEPS,
    arrow,
    caught,
    counter,
    follow,
    histories,
    left_bags,
    left_rows,
    rows_counter,
)

# (spec, group positions, value position) over LEFT (k, v, f, s)
SPECS = [
    (MinMaxSpec(("k",), "v", "out", "min"), [0], 1),
    (MinMaxSpec(("k",), "f", "out", "max"), [0], 2),
    (MinMaxSpec(("s", "f"), "v", "out", "max"), [3, 2], 1),
    (MinMaxSpec((), "f", "out", "min"), [], 2),
    (MinMaxSpec(("k",), "s", "out", "max"), [0], 3),
]


def ref_minmax(i, c):
    spec, group, value = SPECS[i]
    return ref.minmax(c, group, value, spec.kind)


def run(spec: MinMaxSpec, history, fold=None):
    return follow(
        history,
        LEFT,
        lambda z: minmax(spec, z),
        lambda z: build_state(spec, z),
        fold or (lambda s, ch: fold_values(s, value_change(spec, ch))),
        lambda s, ch: minmax_delta(spec, s, ch),
    )


@pytest.mark.parametrize("i", range(len(SPECS)))
@SETTINGS
@given(left_rows)
def test_minmax_equals_the_reference(i, rw):
    got = minmax(SPECS[i][0], arrow(LEFT, rw))
    assert got.schema.names == [*SPECS[i][0].group_by, "out"]
    assert rows_counter(got) == ref_minmax(i, counter(rw))


@pytest.mark.parametrize("i", [0, 1, 3])
@STEPS
@given(histories(left_bags))
def test_the_delta_rule_follows_a_history(i, history):
    exact, carried = run(SPECS[i][0], history)
    assert exact
    assert carried.to_counter() == ref_minmax(i, counter(history[-1]))


def test_nan_orders_above_every_value_and_nulls_are_ignored():
    rows = [(1, None, float("nan"), None), (1, None, 2.0, None), (2, None, None, None)]
    z = ArrowZSet.from_rows(LEFT, rows, [1, 1, 1])
    lo = rows_counter(minmax(MinMaxSpec(("k",), "f", "out", "min"), z))
    hi = {r["k"]: r["out"] for r in minmax(SPECS[1][0], z).to_pylist()}
    assert lo == {(1, 2.0): 1, (2, None): 1}
    assert math.isnan(hi[1]) and hi[2] is None


def test_kind_is_checked():
    with pytest.raises(ValueError, match="kind"):
        MinMaxSpec(("k",), "v", "out", "avg")


def test_planted_fault_forgetting_deletions_is_caught():
    spec, group, value = SPECS[0]

    def forgets(history):
        # the fault: the state folds only insertions, so a deleted value stays a candidate
        def fold(s, ch):
            return fold_values(
                s, value_change(spec, ArrowZSet(ch.table.filter(pc.field("__weight") > 0)))
            )

        exact, carried = run(spec, history, fold)
        return not exact or carried.to_counter() != ref.minmax(
            counter(history[-1]), group, value, "min"
        )

    history = caught(histories(left_bags), forgets)
    assert len(history) >= 3  # a later step reads the state the earlier deletion left wrong
