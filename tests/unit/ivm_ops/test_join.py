"""Inner equi-join against the reference (weights multiplied, NULL keys never match, NaN matches
NaN and -0.0 matches 0.0), and the bilinear delta rule
(L+dL)⋈(R+dR) − L⋈R == dL⋈R + (L+dL)⋈dR. Planted faults: a join that lets NULL keys match, and
a delta rule without the dL⋈dR term; the harness must catch both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.join import JoinSpec, delta_inner_join, inner_join
from spark_sink.ivm.ops.zset import ArrowZSet, WeightOverflow
from tests.unit.ivm_ops.zsets import (
    LEFT,
    RIGHT,
    SETTINGS,
    arrow,
    caught,
    counter,
    left_rows,
    null_keys_filled,
    right_rows,
)

# (spec, left key positions, right key positions)
SPECS = [
    (JoinSpec(("k",), ("j",)), [0], [0]),
    (JoinSpec(("f",), ("g",)), [2], [2]),
    (JoinSpec(("k", "f"), ("j", "g")), [0, 2], [0, 2]),
]


def ref_join(i, left, right):
    _, lk, rk = SPECS[i]
    return ref.inner_join(left, right, lk, rk)


@pytest.mark.parametrize("i", range(len(SPECS)))
@SETTINGS
@given(left_rows, right_rows)
def test_join_equals_the_reference(i, lrows, rrows):
    got = inner_join(SPECS[i][0], arrow(LEFT, lrows), arrow(RIGHT, rrows))
    assert got.schema.names == LEFT.names + RIGHT.names
    assert got.to_counter() == ref_join(i, counter(lrows), counter(rrows))


@pytest.mark.parametrize("i", range(len(SPECS)))
@SETTINGS
@given(left_rows, left_rows, right_rows, right_rows)
def test_the_delta_rule_is_the_change_of_the_join(i, lrows, dlrows, rrows, drrows):
    spec = SPECS[i][0]
    L, dL, R, dR = (
        arrow(LEFT, lrows),
        arrow(LEFT, dlrows),
        arrow(RIGHT, rrows),
        arrow(RIGHT, drrows),
    )
    change = inner_join(spec, L + dL, R + dR) - inner_join(spec, L, R)
    rule = delta_inner_join(spec, dL, R, L + dL, dR)
    assert rule.to_counter() == change.to_counter()
    # and the same identity in the reference, computed independently
    Lc, dLc, Rc, dRc = counter(lrows), counter(dlrows), counter(rrows), counter(drrows)
    assert rule.to_counter() == ref.add(
        ref_join(i, ref.add(Lc, dLc), ref.add(Rc, dRc)), ref.neg(ref_join(i, Lc, Rc))
    )


def test_null_keys_never_match():
    nulls = ArrowZSet.from_rows(LEFT, [(None, 1, None, "a")], [1])
    other = ArrowZSet.from_rows(RIGHT, [(None, 1, None)], [1])
    for spec, _, _ in SPECS:
        assert len(inner_join(spec, nulls, other)) == 0


def test_key_types_must_agree_and_names_must_not_clash():
    with pytest.raises(ValueError, match="one type"):
        inner_join(JoinSpec(("k",), ("g",)), ArrowZSet.empty(LEFT), ArrowZSet.empty(RIGHT))
    with pytest.raises(ValueError, match="share column names"):
        inner_join(JoinSpec(("k",), ("k",)), ArrowZSet.empty(LEFT), ArrowZSet.empty(LEFT))


def test_weight_products_never_wrap():
    left = ArrowZSet.from_rows(LEFT, [(1, 1, 1.0, "a")], [2**32])
    right = ArrowZSet.from_rows(RIGHT, [(1, 1, 1.0)], [2**31])
    with pytest.raises(WeightOverflow):
        inner_join(SPECS[0][0], left, right)


def _null_matching_join(spec: JoinSpec, left: ArrowZSet, right: ArrowZSet) -> ArrowZSet:
    # the fault: NULL keys replaced by a sentinel before joining, so NULL = NULL
    return inner_join(
        spec, null_keys_filled(left, spec.left_keys), null_keys_filled(right, spec.right_keys)
    )


def test_planted_fault_null_keys_matching_is_caught():
    def wrong(pair):
        lrows, rrows = pair
        got = _null_matching_join(SPECS[0][0], arrow(LEFT, lrows), arrow(RIGHT, rrows))
        return got.to_counter() != ref_join(0, counter(lrows), counter(rrows))

    (lrows, _), (rrows, _) = caught(st.tuples(left_rows, right_rows), wrong)
    assert any(r[0] is None for r in lrows) and any(r[0] is None for r in rrows)


def test_planted_fault_missing_the_dl_dr_term_is_caught():
    spec = SPECS[0][0]

    def wrong(ex):
        lrows, dlrows, rrows, drrows = ex
        L, dL = arrow(LEFT, lrows), arrow(LEFT, dlrows)
        R, dR = arrow(RIGHT, rrows), arrow(RIGHT, drrows)
        # the fault: L_old where the rule needs L_new, so dL⋈dR is lost
        rule = inner_join(spec, dL, R) + inner_join(spec, L, dR)
        change = inner_join(spec, L + dL, R + dR) - inner_join(spec, L, R)
        return rule.to_counter() != change.to_counter()

    _, dlrows, _, drrows = caught(st.tuples(left_rows, left_rows, right_rows, right_rows), wrong)
    assert dlrows[0] and drrows[0]
