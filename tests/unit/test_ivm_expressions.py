"""The incremental engine's expression evaluator and aggregate finalization against values Spark
gives (ANSI mode). The differential tests check the same against Spark itself; these pin the
corner cases without a JVM."""

from __future__ import annotations

from decimal import Decimal

import pytest

from spark_sink.ivm.aggregate import (
    AggregateOutput,
    GroupDeltas,
    GroupState,
    NeedsBuild,
    ValueOrder,
    merge,
)
from spark_sink.ivm.cost import PRIOR_PER_KEY_S, CostModel
from spark_sink.ivm.expressions import EvalError, compile_expr, finalize, finisher
from spark_sink.ivm.ops.operator import ZSet, consolidate
from spark_sink.ivm.plan import AggCall, AggRef, Aggregate, Attr, Call, Col, GroupRef, Lit, Scan


def ev(e, row=(), pos=None):
    return compile_expr(e, pos or {})(row)


T, F, N = Lit(True, "boolean"), Lit(False, "boolean"), Lit(None, "boolean")


def test_three_valued_logic():
    assert ev(Call("and", (N, F), "boolean")) is False
    assert ev(Call("and", (N, T), "boolean")) is None
    assert ev(Call("or", (N, T), "boolean")) is True
    assert ev(Call("or", (N, F), "boolean")) is None
    assert ev(Call("not", (N,), "boolean")) is None
    one, null = Lit(1, "int"), Lit(None, "int")
    assert ev(Call("eq", (one, null), "boolean")) is None
    assert ev(Call("eqns", (null, null), "boolean")) is True
    assert ev(Call("in", (one, Lit(2, "int"), null), "boolean")) is None
    assert ev(Call("in", (one, Lit(1, "int"), null), "boolean")) is True


def test_arithmetic_follows_ansi():
    big = Lit((1 << 31) - 1, "int")
    with pytest.raises(EvalError, match="overflows INT"):
        ev(Call("add", (big, Lit(1, "int")), "int"))
    with pytest.raises(EvalError, match="division by zero"):
        ev(Call("div", (Lit(1, "double"), Lit(0, "double")), "double"))
    # Java's remainder: the sign of the dividend
    assert ev(Call("mod", (Lit(-7, "int"), Lit(3, "int")), "int")) == -1
    # DECIMAL: rounded half-up to the type Spark gave the expression
    d = Call(
        "div",
        (Lit(Decimal("1.00"), "decimal(10,2)"), Lit(Decimal("3"), "decimal(10,0)")),
        "decimal(23,13)",
    )
    assert ev(d) == Decimal("0.3333333333333")
    assert ev(
        Call(
            "mul",
            (Lit(Decimal("1.25"), "decimal(3,2)"), Lit(Decimal("0.5"), "decimal(2,1)")),
            "decimal(6,3)",
        )
    ) == Decimal("0.625")
    # a cast of a DOUBLE to INT truncates toward zero
    assert ev(Call("cast", (Lit(-2.7, "double"),), "int|double")) == -2


def test_like_and_strings():
    like = Call("like", (Col(1), Lit("a_c%", "string"), Lit("\\", "string")), "boolean")
    assert ev(like, ("abcdef",), {1: 0}) is True
    assert ev(like, ("abdc",), {1: 0}) is False
    assert ev(like, (None,), {1: 0}) is None


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


def test_consolidate_cancels_equal_rows():
    net = consolidate([(1, "a"), (1, "a"), (2, "b")], [1, -1, 1])
    assert net == {(2, "b"): 1}


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


class _Type:
    def __init__(self, name: str) -> None:
        self.name = name

    def simpleString(self) -> str:  # noqa: N802 - Catalyst's name
        return self.name


class _Literal:
    """A Catalyst Literal as py4j hands it over: ``value()`` is the JVM's internal value,
    converted by py4j where it can (a java.math.BigDecimal becomes a Python Decimal)."""

    def __init__(self, value, dtype: str) -> None:
        self._value, self._type = value, _Type(dtype)

    def value(self):
        return self._value

    def dataType(self):  # noqa: N802 - Catalyst's name
        return self._type


class _SparkDecimal:
    def __init__(self, d: Decimal) -> None:
        self.d = d

    def toJavaBigDecimal(self) -> Decimal:  # noqa: N802 - Spark's name
        return self.d


def test_literals_of_every_type_spark_produces():
    """Issue 24, item 6: a DECIMAL literal raised AttributeError ('toPlainString')."""
    import datetime as dt

    from spark_sink.ivm.catalyst import literal_value

    utc = dt.UTC
    cases = [
        (_Literal(_SparkDecimal(Decimal("10")), "decimal(2,0)"), Decimal("10")),
        (
            _Literal(_SparkDecimal(Decimal("12345678901234567890.123456789")), "decimal(29,9)"),
            Decimal("12345678901234567890.123456789"),
        ),
        (_Literal(19724, "date"), dt.date(2024, 1, 2)),
        (_Literal(1704164645123456, "timestamp"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456, utc)),
        (_Literal(1704164645000000, "timestamp_ntz"), dt.datetime(2024, 1, 2, 3, 4, 5, 0, utc)),
        (_Literal(b"\n\xff", "binary"), b"\n\xff"),
        (_Literal(259200000000, "interval day"), dt.timedelta(days=3)),
        (_Literal(14, "interval year to month"), 14),
        (_Literal(7, "tinyint"), 7),
        (_Literal(1.5, "float"), 1.5),
    ]
    for lit, want in cases:
        got = literal_value(lit)
        assert got == want and type(got) is type(want), (lit.dataType().simpleString(), got)
    for t in ("decimal(38,10)", "date", "timestamp", "binary", "interval day", "void", "string"):
        assert literal_value(_Literal(None, t)) is None


def test_date_and_timestamp_arithmetic_as_spark():
    import datetime as dt

    from spark_sink.ivm.plan import CalendarInterval

    day = Lit(dt.date(2024, 1, 31), "date")
    ts = Lit(dt.datetime(2024, 1, 31, 23, 30, tzinfo=dt.UTC), "timestamp")
    assert ev(Call("date_add", (day, Lit(30, "int")), "date")) == dt.date(2024, 3, 1)
    assert ev(Call("date_sub", (day, Lit(31, "int")), "date")) == dt.date(2023, 12, 31)
    # plusMonths: the day clamped to the month's end (2024 is a leap year)
    assert ev(Call("add_months", (day, Lit(1, "interval month")), "date")) == dt.date(2024, 2, 29)
    assert ev(Call("add_months", (day, Lit(-13, "int")), "date")) == dt.date(2022, 12, 31)
    assert ev(
        Call("ts_add", (ts, Lit(dt.timedelta(minutes=90), "interval minute")), "timestamp")
    ) == (dt.datetime(2024, 2, 1, 1, 0, tzinfo=dt.UTC))
    odd = Lit(CalendarInterval(1, 2, 500_000), "interval")
    assert ev(Call("ts_add", (ts, odd), "timestamp")) == dt.datetime(
        2024, 3, 2, 23, 30, 0, 500_000, tzinfo=dt.UTC
    )
    assert ev(Call("date_add", (Lit(None, "date"), Lit(1, "int")), "date")) is None
    with pytest.raises(EvalError, match="out of range"):
        ev(Call("add_months", (day, Lit(12 * 9000, "int")), "date"))


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
