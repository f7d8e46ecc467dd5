"""The incremental aggregate's row path without a JVM: group state (rows and non-NULL inputs
counted), finalization against values Spark gives (ANSI mode) and the specialized finisher
equal to it, and the order of a MIN/MAX values table. Exact sums: test_exact_sum.py."""

from __future__ import annotations

from decimal import Decimal

import pytest

from spark_sink.ivm.aggregate import AggregateOutput, GroupDeltas, GroupState, ValueOrder, merge
from spark_sink.ivm.expressions import finalize, finisher
from spark_sink.ivm.ops.operator import ZSet
from spark_sink.ivm.plan import AggCall, AggRef, Aggregate, Attr, Col, GroupRef, Lit, Scan


def test_avg_of_decimal_rounds_like_spark():
    # Spark: AVG(DECIMAL(10,2)) is DECIMAL(14,6); 1.00, 2.00, 2.00 -> 1.666667
    avg = AggCall("avg", (Col(1),), "decimal(14,6)", "decimal(10,2)")
    assert finalize(avg, Decimal("5.00"), 3) == Decimal("1.666667")
    assert finalize(avg, Decimal("0"), 0) is None
    s = AggCall("sum", (Col(1),), "bigint", "int")
    assert finalize(s, Decimal(7), 2) == 7 and finalize(s, Decimal(0), 0) is None
    c = AggCall("count", (Lit(1, "int"),), "bigint", "int")
    assert finalize(c, 0, 4) == 4


def test_group_state_counts_rows_and_non_null_inputs():
    scan = Scan("t", (Attr(1, "g", "int", False), Attr(2, "v", "int", True)))
    aggs = (
        AggCall("count", (Lit(1, "int"),), "bigint", "int"),
        AggCall("sum", (Col(2),), "bigint", "int"),
        AggCall("avg", (Col(2),), "double", "int"),
    )
    outs = tuple(
        (Attr(10 + i, n, "bigint", True), e)
        for i, (n, e) in enumerate(
            [("g", GroupRef(0)), ("n", AggRef(0)), ("s", AggRef(1)), ("a", AggRef(2))]
        )
    )
    agg = Aggregate((Col(1),), ("int",), aggs, outs, scan)
    z = ZSet((1, 2), [(1, 5), (1, None), (2, 3), (1, 5)], [1, 1, 1, -1])
    folded = GroupDeltas(agg, z.ids).fold(z)
    g1 = merge(agg, None, folded[(1,)])
    assert g1.rows == 1 and g1.counts == [1, 0, 0]  # +5, +NULL, -5: one row, no non-NULL v
    out = AggregateOutput(agg)
    assert out.row((1,), g1) == (1, 1, None, None)  # SUM and AVG of no values are NULL
    g2 = merge(agg, GroupState(2, [0, Decimal(4), Decimal(4)], [2, 2, 2], [0.0] * 3), folded[(2,)])
    assert out.row((2,), g2) == (2, 3, 7, 7 / 3)


def test_value_order_sorts_ascending_for_min_and_descending_for_max():
    from kvstore.schema import TableSchema, parse_ddl
    from kvstore.table_info import TableInfo  # noqa: F401  (the codec needs a table's column)

    class Info:  # the two attributes ValueOrder reads
        name = "t__sv_values_0_0"
        table_schema = TableSchema(name, parse_ddl("o BINARY, v DOUBLE, n BIGINT"), ["o"])

    values = [3.5, -2.0, 0.0, -1e300, 7e10, float("nan")]
    asc = ValueOrder(Info, descending=False)  # type: ignore[arg-type]
    desc = ValueOrder(Info, descending=True)  # type: ignore[arg-type]
    by_asc = sorted(values, key=asc)
    assert by_asc[:-1] == sorted(v for v in values if v == v) and by_asc[-1] != by_asc[-1]
    assert sorted(values, key=desc)[1:] == sorted((v for v in values if v == v), reverse=True)


@pytest.mark.parametrize(
    "call",
    [
        AggCall("count", (), "bigint", ""),
        AggCall("count", (Col(1),), "bigint", "int", distinct=True),
        AggCall("min", (Col(1),), "int", "int"),
        AggCall("max", (Col(1),), "decimal(10,2)", "decimal(10,2)"),
        AggCall("sum", (Col(1),), "bigint", "int"),
        AggCall("sum", (Col(1),), "decimal(20,2)", "decimal(10,2)"),
        AggCall("sum", (Col(1),), "double", "double"),
        AggCall("avg", (Col(1),), "double", "bigint"),
        AggCall("avg", (Col(1),), "decimal(14,6)", "decimal(10,2)"),
    ],
)
def test_finisher_equals_finalize(call):
    """The specialized finisher gives finalize's value, and its errors, for every state."""
    totals = {"double": [0.0, 2.5, -1e300], "int": [0, 7, -3]}.get(call.input_dtype, [0, 9, -4])
    if call.input_dtype.startswith("decimal") or call.dtype.startswith("decimal"):
        totals = [Decimal(0), Decimal("12.34"), Decimal("-5.01")]
    for total in [*totals, None, 2**63]:
        for n in (0, 1, 3):
            try:
                want = finalize(call, total, n)
            except Exception as e:  # noqa: BLE001 - the same error must come from both
                with pytest.raises(type(e)):
                    finisher(call)(total, n)
                continue
            assert finisher(call)(total, n) == want
