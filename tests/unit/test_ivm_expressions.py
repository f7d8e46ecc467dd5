"""The incremental engine's expression evaluator against values Spark gives (ANSI mode), and
the literals Catalyst hands it. The differential tests check the same against Spark itself;
these pin the corner cases without a JVM."""

from __future__ import annotations

from decimal import Decimal

import pytest

from spark_sink.ivm.expressions import EvalError, compile_expr
from spark_sink.ivm.plan import Call, Col, Lit


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
