"""LEFT/RIGHT/FULL outer equi-join against the reference (inner rows, then each outer side's
dangling rows padded with NULLs; a NULL key always dangles; NaN matches NaN), and its delta rule
(inner delta plus the touched keys' dangling rows retracted at the old state and emitted at the
new) equal to the change of the whole join over histories of both tables, the output carried
from step to step. Planted faults: a join whose NULL keys match, and a rule that forgets the
touched keys' old dangling rows; the harness must catch both."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.join import inner_join
from spark_sink.ivm.ops.keys import distinct_keys, restrict_to_keys
from spark_sink.ivm.ops.outer_join import OuterJoinSpec, delta_outer_join, outer_join
from spark_sink.ivm.ops.zset import ArrowZSet
from tests.unit.ivm_ops.zsets import (
    LEFT,
    RIGHT,
    SETTINGS,
    STEPS,
    arrow,
    caught,
    counter,
    left_bags,
    left_rows,
    null_keys_filled,
    right_bags,
    right_rows,
)

KEYS = [((0,), (0,), ("k",), ("j",)), ((2,), (2,), ("f",), ("g",))]
KEYS += [((0, 2), (0, 2), ("k", "f"), ("j", "g"))]
# each kind once with each key shape, and FULL (which holds the other two) with all
CASES = [("left", *KEYS[0]), ("right", *KEYS[1]), ("left", *KEYS[2])]
CASES += [("full", *keys) for keys in KEYS]
RULE_CASES = [0, 1, 5]  # the delta rule: each kind once, each key shape once
WIDTHS = (len(LEFT), len(RIGHT))
both_histories = st.lists(st.tuples(left_bags, right_bags), min_size=2, max_size=4)


def spec_of(i: int) -> OuterJoinSpec:
    kind, _, _, lk, rk = CASES[i]
    return OuterJoinSpec(kind, lk, rk)


def ref_outer(i, left, right):
    kind, li, ri, _, _ = CASES[i]
    return ref.outer_join(left, right, li, ri, kind, WIDTHS)


@pytest.mark.parametrize("i", range(len(CASES)))
@SETTINGS
@given(left_rows, right_rows)
def test_outer_join_equals_the_reference(i, lrows, rrows):
    got = outer_join(spec_of(i), arrow(LEFT, lrows), arrow(RIGHT, rrows))
    assert got.schema.names == LEFT.names + RIGHT.names
    assert got.to_counter() == ref_outer(i, counter(lrows), counter(rrows))


@pytest.mark.parametrize("i", RULE_CASES)
@STEPS
@given(both_histories)
def test_the_delta_rule_follows_a_history(i, history):
    spec = spec_of(i)
    states = [(arrow(LEFT, lr), arrow(RIGHT, rr)) for lr, rr in history]
    carried = outer_join(spec, *states[0])
    for (lo, ro), (ln, rn) in zip(states, states[1:], strict=False):
        rule = delta_outer_join(spec, lo, ro, ln - lo, rn - ro)
        assert (
            rule.to_counter() == (outer_join(spec, ln, rn) - outer_join(spec, lo, ro)).to_counter()
        )
        carried = carried + rule
    last_l, last_r = history[-1]
    assert carried.to_counter() == ref_outer(i, counter(last_l), counter(last_r))


@pytest.mark.parametrize("i", RULE_CASES)
@STEPS
@given(left_rows, right_rows, left_rows, right_rows)
def test_the_delta_rule_holds_for_any_zsets(i, lrows, rrows, dlrows, drrows):
    spec = spec_of(i)
    L, R, dL, dR = (
        arrow(LEFT, lrows),
        arrow(RIGHT, rrows),
        arrow(LEFT, dlrows),
        arrow(RIGHT, drrows),
    )
    rule = delta_outer_join(spec, L, R, dL, dR)
    Lc, Rc = counter(lrows), counter(rrows)
    Ln, Rn = ref.add(Lc, counter(dlrows)), ref.add(Rc, counter(drrows))
    assert rule.to_counter() == ref.add(ref_outer(i, Ln, Rn), ref.neg(ref_outer(i, Lc, Rc)))


def test_null_keys_always_dangle():
    left = ArrowZSet.from_rows(LEFT, [(None, 1, None, "a")], [1])
    right = ArrowZSet.from_rows(RIGHT, [(None, 1, None)], [1])
    got = outer_join(OuterJoinSpec("full", ("k",), ("j",)), left, right).to_counter()
    assert got == {(None, 1, None, "a", None, None, None): 1, (None,) * 4 + (None, 1, None): 1}


def test_restrict_to_keys_narrows_by_join_or_grouping_equality():
    z = ArrowZSet.from_rows(LEFT, [(None, 1, float("nan"), "a"), (1, 1, -0.0, "b")], [1, 1])
    keys = pa.table({"k": pa.array([None, 1], pa.int64()), "f": [float("nan"), 0.0]})
    assert len(restrict_to_keys(z, ("k", "f"), keys, nulls_equal=True)) == 2
    assert restrict_to_keys(z, ("k", "f"), keys, nulls_equal=False).to_counter() == {
        (1, 1, 0.0, "b"): 1
    }


def test_kind_and_key_types_are_checked():
    with pytest.raises(ValueError, match="kind"):
        OuterJoinSpec("inner", ("k",), ("j",))
    with pytest.raises(ValueError, match="one type"):
        outer_join(
            OuterJoinSpec("left", ("k",), ("g",)), ArrowZSet.empty(LEFT), ArrowZSet.empty(RIGHT)
        )


def _null_matching_outer_join(spec: OuterJoinSpec, left: ArrowZSet, right: ArrowZSet) -> ArrowZSet:
    # the fault: NULL keys replaced by a sentinel before joining, so NULL = NULL
    return outer_join(
        spec, null_keys_filled(left, spec.left_keys), null_keys_filled(right, spec.right_keys)
    )


def test_planted_fault_null_keys_matching_is_caught():
    spec = OuterJoinSpec("full", ("k",), ("j",))

    def wrong(pair):
        lrows, rrows = pair
        got = _null_matching_outer_join(spec, arrow(LEFT, lrows), arrow(RIGHT, rrows))
        return got.to_counter() != ref.outer_join(
            counter(lrows), counter(rrows), (0,), (0,), "full", WIDTHS
        )

    (lrows, _), (rrows, _) = caught(st.tuples(left_rows, right_rows), wrong)
    assert any(r[0] is None for r in lrows) or any(r[0] is None for r in rrows)


def test_planted_fault_forgetting_old_dangling_rows_is_caught():
    spec = OuterJoinSpec("left", ("k",), ("j",))

    def wrong(history):
        (lr0, rr0), (lr1, rr1) = history[:2]
        lo, ro, ln, rn = arrow(LEFT, lr0), arrow(RIGHT, rr0), arrow(LEFT, lr1), arrow(RIGHT, rr1)
        dl, dr = ln - lo, rn - ro
        touched = pa.concat_tables(
            [
                distinct_keys(dl.table, ("k",), nulls_equal=False),
                distinct_keys(dr.table, ("j",), nulls_equal=False).rename_columns(["k"]),
            ]
        )
        lt = restrict_to_keys(lo, ("k",), touched, nulls_equal=False)
        rt = restrict_to_keys(ro, ("j",), touched, nulls_equal=False)
        # the fault: the touched keys' old dangling rows are never retracted (a left row whose
        # key gains a match keeps its NULL-padded row)
        old_dangling = outer_join(spec, lt, rt) - inner_join(spec.inner, lt, rt)
        faulty = delta_outer_join(spec, lo, ro, dl, dr) + old_dangling
        change = outer_join(spec, ln, rn) - outer_join(spec, lo, ro)
        return faulty.to_counter() != change.to_counter()

    history = caught(both_histories, wrong)
    assert history[0][0][0]
