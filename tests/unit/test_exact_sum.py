"""Sums that stay exact: an aggregate's DOUBLE sum (a compensated pair: a value added and
removed leaves no trace; NaN or infinity asks for a build), its DECIMAL sums past 28 digits,
and ``exact_pair`` (the build's exact sum, rounded once)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from spark_sink.ivm.aggregate import GroupDeltas, GroupState, NeedsBuild, merge
from spark_sink.ivm.ops.operator import ZSet
from spark_sink.ivm.plan import AggCall, AggRef, Aggregate, Attr, Col, GroupRef, Scan


def _double_sum_agg() -> Aggregate:
    scan = Scan("t", (Attr(1, "g", "int", False), Attr(2, "x", "double", True)))
    aggs = (AggCall("sum", (Col(2),), "double", "double"),)
    outs = ((Attr(10, "g", "int", False), GroupRef(0)), (Attr(11, "s", "double", True), AggRef(0)))
    return Aggregate((Col(1),), ("int",), aggs, outs, scan)


def test_a_double_sum_leaves_no_trace_of_a_value_added_and_removed():
    """The compensated pair: 1e20 + 0.1 + 0.2, then -1e20, is the exact sum of 0.1 and 0.2
    rounded once (math.fsum's); a plain running float sum is 0.0 after it; and many small
    steps do not drift."""
    import math

    agg = _double_sum_agg()
    folder = GroupDeltas(agg, (1, 2))
    st = None
    for rows, ws in [([(1, 1e20), (1, 0.1)], [1, 1]), ([(1, 0.2)], [1]), ([(1, 1e20)], [-1])]:
        st = merge(agg, st, folder.fold(ZSet((1, 2), rows, ws))[(1,)])
    exact = math.fsum([0.1, 0.2])
    assert st is not None and st.sums[0] == exact and st.rows == 2
    naive = 0.0
    for x in (1e20, 0.1, 0.2, -1e20):
        naive += x
    assert naive == 0.0  # what the compensation is for
    for i in range(1000):  # add and remove 0.1 a thousand times: back exactly
        st = merge(agg, st, folder.fold(ZSet((1, 2), [(1, 0.1)], [1 if i % 2 == 0 else -1]))[(1,)])
    assert st.sums[0] == exact


def test_a_double_sum_meeting_nan_or_infinity_asks_for_a_build():
    agg = _double_sum_agg()
    folder = GroupDeltas(agg, (1, 2))
    with pytest.raises(NeedsBuild, match="nan"):
        folder.fold(ZSet((1, 2), [(1, float("nan"))], [1]))
    held = GroupState(1, [float("inf")], [1], [0.0])
    with pytest.raises(NeedsBuild, match="inf"):
        merge(agg, held, folder.fold(ZSet((1, 2), [(1, 1.0)], [1]))[(1,)], (1,))


def test_exact_pair_is_the_exact_sum_rounded_once():
    import math
    from fractions import Fraction

    from spark_sink.ivm.exact_sum import exact_pair

    values = [1e20, 0.1, 0.2, -1e20, 3.3e9, 0.7, -3.3e9]
    hi, lo = exact_pair(values)
    exact = sum((Fraction(v) for v in values), Fraction(0))
    assert hi == math.fsum(values) == float(exact)
    assert Fraction(hi) + Fraction(lo) == pytest.approx(exact, rel=2**-100)
    assert math.isnan(exact_pair([1.0, float("nan")])[0])
    assert exact_pair([float("inf"), 1.0]) == (float("inf"), 0.0)


def test_decimal_sums_past_28_digits_stay_exact():
    """A DECIMAL(30,2) running sum (the state of SUM over DECIMAL(20,2)) keeps every digit:
    Python's default decimal context would round the fold and the merge to 28."""
    scan = Scan("t", (Attr(1, "g", "int", False), Attr(2, "v", "decimal(20,2)", True)))
    aggs = (AggCall("sum", (Col(2),), "decimal(30,2)", "decimal(20,2)"),)
    outs = (
        (Attr(10, "g", "int", False), GroupRef(0)),
        (Attr(11, "s", "decimal(30,2)", True), AggRef(0)),
    )
    agg = Aggregate((Col(1),), ("int",), aggs, outs, scan)
    big = Decimal("987654321098765432.12")
    z = ZSet((1, 2), [(1, big), (1, big), (1, Decimal("0.01"))], [1, 1, 1])
    folded = GroupDeltas(agg, z.ids).fold(z)
    start = GroupState(1, [Decimal("123456789012345678901234567.89")], [1], [0.0])
    g = merge(agg, start, folded[(1,)])
    assert g.sums[0] == Decimal("123456790987654321098765432.14")
    assert str(g.sums[0]) == "123456790987654321098765432.14"
