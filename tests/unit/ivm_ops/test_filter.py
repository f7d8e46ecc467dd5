"""Filter against the reference: a row stays only where the predicate is TRUE (NULL drops it,
as WHERE), weights kept; filter is linear; a filter that keeps NULL rows is caught."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.filter import FilterSpec, apply_filter
from tests.unit.ivm_ops.zsets import LEFT, SETTINGS, arrow, caught, counter, left_rows


def sql_and(a, b):
    """Kleene AND, as SQL."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def sql_gt(a, b):
    return None if a is None or b is None else a > b


def sql_ne(a, b):
    return None if a is None or b is None else a != b


# (Arrow predicate, the same predicate over a row tuple (k, v, f, s)); the float predicate
# avoids ordering comparisons, where Arrow (IEEE: NaN compares false) and Spark (NaN is the
# largest value) differ
PREDICATES = [
    (
        (pc.field("v") > 0) & (pc.field("k") != 1),
        lambda r: sql_and(sql_gt(r[1], 0), sql_ne(r[0], 1)),
    ),
    (pc.field("s") == "a", lambda r: None if r[3] is None else r[3] == "a"),
    (pc.is_null(pc.field("k")), lambda r: r[0] is None),
    (lambda t: pc.is_nan(t["f"]), lambda r: None if r[2] is None else r[2] != r[2]),
    (lambda t: pc.equal(t["f"], 0.0), lambda r: None if r[2] is None else r[2] == 0.0),
]


@pytest.mark.parametrize("i", range(len(PREDICATES)))
@SETTINGS
@given(left_rows)
def test_filter_equals_the_reference(i, rw):
    arrow_pred, row_pred = PREDICATES[i]
    got = apply_filter(FilterSpec(arrow_pred), arrow(LEFT, rw))
    assert got.to_counter() == ref.filter_(counter(rw), row_pred)


@SETTINGS
@given(left_rows, left_rows)
def test_filter_is_linear(a, b):
    spec = FilterSpec(PREDICATES[0][0])
    za, zb = arrow(LEFT, a), arrow(LEFT, b)
    assert (
        apply_filter(spec, za + zb).to_counter()
        == (apply_filter(spec, za) + apply_filter(spec, zb)).to_counter()
    )


def test_a_predicate_of_the_wrong_shape_is_refused():
    z = arrow(LEFT, ([(1, 1, 1.0, "a")], [1]))
    with pytest.raises(ValueError, match="predicate returned"):
        apply_filter(FilterSpec(lambda t: pa.array([1], pa.int64())), z)


def test_planted_fault_keeping_null_predicates_is_caught():
    _, row_pred = PREDICATES[0]
    # the fault: a NULL predicate kept as if TRUE (WHERE NOT FALSE instead of WHERE TRUE)
    not_false = FilterSpec(
        lambda t: pc.fill_null(pc.and_kleene(pc.greater(t["v"], 0), pc.not_equal(t["k"], 1)), True)
    )

    def keeps_nulls(rw):
        got = apply_filter(not_false, arrow(LEFT, rw)).to_counter()
        return got != ref.filter_(counter(rw), row_pred)

    rows, _ = caught(left_rows, keeps_nulls)
    assert any(row_pred(r) is None for r in rows)
