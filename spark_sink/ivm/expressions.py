"""Evaluate plan expressions on Python rows, with Spark's semantics (ANSI mode, Spark 4's
default): three-valued logic, NULL in gives NULL out, integer overflow and division by zero are
errors, DECIMAL results are rounded half-up to the type Spark gave the expression.

An incremental epoch evaluates expressions on the rows of a change (a few thousand rows), on the
driver: a Spark job costs at least 0.3 s on our 2-core machines (docs/design.md §6.4), more than
the whole epoch's budget. ``compile_expr`` runs at build time, so an expression this module does
not implement exactly is refused there (Unsupported, naming it) and the view falls back to full
recompute under ``auto``. The differential tests compare every result with Spark's own.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any

from kvstore.errors import InvalidArgument
from spark_sink.ivm import string_casts
from spark_sink.ivm.functions import BY_OP
from spark_sink.ivm.plan import (
    AggCall,
    AggRef,
    CalendarInterval,
    Call,
    Col,
    Expr,
    GroupRef,
    Lit,
    Unsupported,
)

Row = tuple
Fn = Callable[[Row], Any]

_INT_RANGE = {
    "bigint": (-(1 << 63), (1 << 63) - 1),
    "int": (-(1 << 31), (1 << 31) - 1),
    "smallint": (-(1 << 15), (1 << 15) - 1),
    "tinyint": (-(1 << 7), (1 << 7) - 1),
}
WIDE_DECIMALS = Context(prec=80)  # exact for DECIMAL(38, s) sums and products


class EvalError(InvalidArgument):
    """The query fails on this data, as it would in Spark (overflow, division by zero)."""


@functools.lru_cache(maxsize=1024)
def decimal_type(dtype: str) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(p,s)`` type string, else None. Cached: the aggregate
    fold asks once per changed row (a profile found this regex at 10% of an epoch)."""
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", dtype)
    return (int(m.group(1)), int(m.group(2))) if m else None


def fit(value: Any, dtype: str, what: str = "") -> Any:
    """``value`` (an exact Python number) as a value of Spark type ``dtype``; ANSI errors."""
    if value is None:
        return None
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        if not lo <= value <= hi:
            raise EvalError(f"{what or 'a value'}: {value} overflows {dtype.upper()}")
        return int(value)
    d = decimal_type(dtype)
    if d is not None:
        p, s = d
        q = Decimal(value).quantize(
            Decimal(1).scaleb(-s), rounding=ROUND_HALF_UP, context=WIDE_DECIMALS
        )
        if abs(q) >= Decimal(10) ** (p - s):
            raise EvalError(f"{what or 'a value'}: {value} overflows DECIMAL({p},{s})")
        return q
    if dtype in ("double", "float"):
        return float(value)
    return value


def _is_num(dtype: str) -> bool:
    return dtype in _INT_RANGE or dtype in ("double", "float") or dtype.startswith("decimal")


def _arith(op: str, dtype: str) -> Callable[[Any, Any], Any]:
    exact = dtype in _INT_RANGE or dtype.startswith("decimal")

    def to_exact(v):
        return Decimal(v) if isinstance(v, Decimal | float) and dtype.startswith("decimal") else v

    if op == "add":
        f = lambda a, b: to_exact(a) + to_exact(b)  # noqa: E731
    elif op == "sub":
        f = lambda a, b: to_exact(a) - to_exact(b)  # noqa: E731
    elif op == "mul":
        f = lambda a, b: to_exact(a) * to_exact(b)  # noqa: E731
    elif op == "div":

        def f(a, b):
            if b == 0:
                raise EvalError("division by zero")
            if dtype.startswith("decimal"):
                with localcontext(WIDE_DECIMALS):
                    return Decimal(a) / Decimal(b)
            return float(a) / float(b)
    elif op == "mod":

        def f(a, b):
            if b == 0:
                raise EvalError("division by zero (remainder)")
            if isinstance(a, float) or isinstance(b, float):
                return math.fmod(a, b)
            r = abs(a) % abs(b)
            return -r if a < 0 else r
    else:
        raise Unsupported(f"operator {op}", code="EXPRESSION")

    def run(a, b):
        if a is None or b is None:
            return None
        v = f(a, b)
        return fit(v, dtype, op) if exact else float(v)

    return run


def _cmp(op: str) -> Callable[[Any, Any], Any]:
    import operator

    f = {
        "eq": operator.eq,
        "lt": operator.lt,
        "le": operator.le,
        "gt": operator.gt,
        "ge": operator.ge,
    }[op]

    def run(a, b):
        if a is None or b is None:
            return None
        return f(a, b)

    return run


def _like_regex(pattern: str, escape: str) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


# Spark's ANSI casts from STRING (spark_sink.ivm.string_casts), by the target's family.
_TEXT_PARSERS: dict[str, Callable[[str], Any]] = {
    "integral": string_casts.parse_integral,
    "decimal": string_casts.parse_decimal,
    "double": string_casts.parse_double,
    "date": string_casts.parse_date,
    "boolean": string_casts.parse_boolean,
}


def _cast_family(dtype: str) -> str:
    if dtype in _INT_RANGE:
        return "integral"
    return "decimal" if dtype.startswith("decimal") else dtype


def _from_text(parse: Callable[[str], Any], dtype: str) -> Callable[[Any], Any]:
    """A cast from STRING: NULL stays NULL; text Spark refuses raises EvalError, as Spark
    raises CAST_INVALID_INPUT; the value is fitted to ``dtype`` (its range, its scale)."""

    def from_text(v: str | None) -> Any:
        if v is None:
            return None
        try:
            x = parse(v)
        except OverflowError as e:
            raise EvalError(f"cast of {v!r} to {dtype.upper()}: {e}") from None
        if x is None:
            raise EvalError(f"cast of {v!r} to {dtype.upper()}: not a valid {dtype.upper()}")
        try:
            return fit(x, dtype, "cast")
        except InvalidOperation:  # an exponent no DECIMAL(38) can hold
            raise EvalError(f"cast of {v!r} to {dtype.upper()}: out of range") from None

    return from_text


def _cast(dtype: str, src: str) -> Callable[[Any], Any]:
    if dtype == src:
        return lambda v: v
    if dtype in _INT_RANGE and (src in _INT_RANGE or src.startswith("decimal")):
        return lambda v: None if v is None else fit(int(v), dtype, "cast")
    if dtype in _INT_RANGE and src in ("double", "float"):

        def to_int(v):
            if v is None:
                return None
            if math.isnan(v) or math.isinf(v):
                raise EvalError(f"cast of {v} to {dtype.upper()}")
            return fit(int(v), dtype, "cast")

        return to_int
    if dtype in ("double", "float") and _is_num(src):
        return lambda v: None if v is None else float(v)
    if dtype.startswith("decimal") and (src in _INT_RANGE or src.startswith("decimal")):
        return lambda v: None if v is None else fit(Decimal(v), dtype, "cast")
    if dtype.startswith("decimal") and src in ("double", "float"):

        def to_dec(v):
            if v is None:
                return None
            if math.isnan(v) or math.isinf(v):
                raise EvalError(f"cast of {v} to {dtype.upper()}")
            return fit(Decimal(repr(v)), dtype, "cast")

        return to_dec
    if src == "string" and (parse := _TEXT_PARSERS.get(_cast_family(dtype))) is not None:
        return _from_text(parse, dtype)
    if dtype == "string" and (src in _INT_RANGE or src == "string"):
        return lambda v: None if v is None else str(v)
    if dtype == "string" and src.startswith("decimal"):
        return lambda v: None if v is None else format(v, "f")  # plain, at its scale: Spark's
    if dtype == "string" and src == "boolean":
        return lambda v: None if v is None else ("true" if v else "false")
    if dtype == "string" and src == "date":
        return lambda v: None if v is None else v.isoformat()  # yyyy-MM-dd, as Spark's
    if dtype == "date" and src in ("timestamp", "timestamp_ntz"):
        # the session's zone is UTC (catalyst refuses another): the UTC calendar day
        return lambda v: None if v is None else v.astimezone(dt.UTC).date()
    if dtype == "timestamp" and src == "date":
        return lambda v: None if v is None else dt.datetime(v.year, v.month, v.day, tzinfo=dt.UTC)
    raise Unsupported(
        f"a cast from {src} to {dtype} is not maintained incrementally", code="EXPRESSION"
    )


def plus_months(v: dt.date | dt.datetime, months: int) -> dt.date | dt.datetime:
    """``v`` moved by ``months`` calendar months, the day clamped to the last of the month (as
    Java's ``plusMonths``, which Spark uses: Jan 31 + 1 month is Feb 28 or 29)."""
    y, m = divmod(v.month - 1 + months, 12)
    year, month = v.year + y, m + 1
    if not 1 <= year <= 9999:
        raise EvalError(f"date arithmetic: year {year} is out of range")
    return v.replace(year=year, month=month, day=min(v.day, calendar.monthrange(year, month)[1]))


def _datetime_op(op: str) -> Callable[[Any, Any], Any]:
    """Date and timestamp arithmetic as Spark does it in the UTC session: ``date_add`` and
    ``date_sub`` (a date and an integer of days), ``add_months`` (a date or timestamp and a
    number of months: ``add_months`` or a year-month INTERVAL), ``ts_add`` (a timestamp and a
    day-time INTERVAL or a CalendarInterval: months, then days, then microseconds)."""

    def run(a, b):
        if a is None or b is None:
            return None
        try:
            if op == "date_add":
                return a + dt.timedelta(days=int(b))
            if op == "date_sub":
                return a - dt.timedelta(days=int(b))
            if op == "add_months":
                return plus_months(a, int(b))
            if isinstance(b, CalendarInterval):
                moved = plus_months(a, b.months) if b.months else a
                return moved + dt.timedelta(days=b.days, microseconds=b.micros)
            return a + b
        except OverflowError as e:
            raise EvalError(f"{op}: {a} and {b}: out of range ({e})") from None

    return run


def compile_expr(e: Expr, pos: dict[int, int], env: dict | None = None) -> Fn:
    """A function of a row (a tuple; column id -> index in ``pos``) computing ``e``.
    GroupRef/AggRef read ``env['groups']`` / ``env['aggs']`` positions of the row instead."""
    if isinstance(e, Col):
        i = pos[e.id]
        return lambda r: r[i]
    if isinstance(e, GroupRef | AggRef):
        assert env is not None, "GroupRef/AggRef outside an aggregate's results"
        i = env["groups" if isinstance(e, GroupRef) else "aggs"][e.index]
        return lambda r: r[i]
    if isinstance(e, Lit):
        v = e.value
        return lambda r: v
    assert isinstance(e, Call)
    args = [compile_expr(a, pos, env) for a in e.args]
    op, dtype = e.op, e.dtype
    if op == "and":
        a, b = args

        def f_and(r):
            x = a(r)
            if x is False:
                return False
            y = b(r)
            if y is False:
                return False
            return None if x is None or y is None else True

        return f_and
    if op == "or":
        a, b = args

        def f_or(r):
            x = a(r)
            if x is True:
                return True
            y = b(r)
            if y is True:
                return True
            return None if x is None or y is None else False

        return f_or
    if op == "not":
        (a,) = args
        return lambda r: None if (x := a(r)) is None else not x
    if op == "isnull":
        (a,) = args
        return lambda r: a(r) is None
    if op == "isnotnull":
        (a,) = args
        return lambda r: a(r) is not None
    if op == "eqns":
        a, b = args
        return lambda r: a(r) == b(r)  # None == None is True, None == x False
    if op in ("eq", "lt", "le", "gt", "ge"):
        a, b = args
        cmp = _cmp(op)
        return lambda r: cmp(a(r), b(r))
    if op in ("add", "sub", "mul", "div", "mod"):
        a, b = args
        arith = _arith(op, dtype)
        return lambda r: arith(a(r), b(r))
    if op in ("date_add", "date_sub", "add_months", "ts_add"):
        a, b = args
        f_dt = _datetime_op(op)
        return lambda r: f_dt(a(r), b(r))
    if op == "neg":
        (a,) = args
        return lambda r: None if (x := a(r)) is None else fit(-x, dtype, "negation")
    if op == "abs":
        (a,) = args
        return lambda r: None if (x := a(r)) is None else fit(abs(x), dtype, "abs")
    if op == "cast":
        to, src = dtype.split("|")
        (a,) = args
        c = _cast(to, src)
        return lambda r: c(a(r))
    if op == "in":
        v, *items = args

        def f_in(r):
            x = v(r)
            if x is None:
                return None
            vals = [i(r) for i in items]
            if x in [y for y in vals if y is not None]:
                return True
            return None if any(y is None for y in vals) else False

        return f_in
    if op == "coalesce":

        def f_coalesce(r):
            for a in args:
                x = a(r)
                if x is not None:
                    return x
            return None

        return f_coalesce
    if op == "if":
        p, t, f = args
        return lambda r: t(r) if p(r) is True else f(r)
    if op == "case":
        pairs = [(args[i], args[i + 1]) for i in range(0, len(args) - 1, 2)]
        default = args[-1]

        def f_case(r):
            for p, v in pairs:
                if p(r) is True:
                    return v(r)
            return default(r)

        return f_case
    if op == "like":
        a, pat, esc = e.args
        assert isinstance(pat, Lit) and isinstance(esc, Lit)
        if pat.value is None:
            return lambda r: None
        rx = _like_regex(str(pat.value), str(esc.value))
        subject = args[0]
        return lambda r: None if (x := subject(r)) is None else rx.fullmatch(x) is not None
    fn = BY_OP.get(op)
    if fn is not None:
        return _strict(fn.value, args)
    raise Unsupported(f"operator {op} is not maintained incrementally", code="EXPRESSION")


def _strict(value: Callable[..., Any], args: list[Fn]) -> Fn:
    """A strict function of the arguments' values: NULL when any argument is NULL."""
    if len(args) == 1:
        (a,) = args
        return lambda r: None if (x := a(r)) is None else value(x)
    if len(args) == 2:
        a, b = args
        return lambda r: None if (x := a(r)) is None or (y := b(r)) is None else value(x, y)

    def f(r):
        vals = [a(r) for a in args]
        return None if any(v is None for v in vals) else value(*vals)

    return f


# ---------------------------------------------------------------------- aggregates


def ddl_of(dtype: str) -> str:
    """A Spark simpleString as our DDL type."""
    if dtype.startswith("decimal"):
        return dtype.upper()
    ddl = {
        "bigint": "BIGINT",
        "int": "INT",
        "smallint": "INT",
        "tinyint": "INT",
        "double": "DOUBLE",
        "float": "DOUBLE",
        "string": "STRING",
        "boolean": "BOOLEAN",
        "date": "DATE",
        "timestamp": "TIMESTAMP",
        "timestamp_ntz": "TIMESTAMP",
        "binary": "BINARY",
    }.get(dtype)
    if ddl is None:
        raise Unsupported(
            f"a value of type {dtype} is not kept in a state table", code="EXPRESSION"
        )
    return ddl


def agg_state_type(a: AggCall) -> str:
    """The DDL type of an aggregate's running value in the state table: the running sum (exact
    for integers and DECIMAL; DOUBLE, compensated, for floating point) or, for MIN and MAX, the
    current extreme (the argument's type)."""
    if a.kind in ("min", "max"):
        return ddl_of(a.input_dtype)
    if a.kind == "count":
        return "BIGINT"
    d = decimal_type(a.input_dtype)
    if d is not None:
        p, s = d
        return f"DECIMAL({min(38, p + 10)},{s})"
    if a.input_dtype in _INT_RANGE:
        return "DECIMAL(38,0)"
    return "DOUBLE"


def compensated(a: AggCall) -> bool:
    """Whether the running sum is a DOUBLE kept with a compensation term (docs/design.md §6.4:
    the sum is held as an unevaluated pair hi + lo, updated exactly and rounded to 106 bits)."""
    return a.kind in ("sum", "avg") and agg_state_type(a) == "DOUBLE"


def keeps_values(a: AggCall) -> bool:
    """Whether the aggregate keeps a multiset of its input values per group in a state table:
    MIN and MAX (to find the next extreme when the current one goes), and DISTINCT aggregates
    (a value counts while its multiplicity is positive)."""
    return a.kind in ("min", "max") or a.distinct


def agg_input(a: AggCall, v: Any) -> Any:
    """The value an input row adds to the running sum."""
    if v is None:
        return None
    if a.input_dtype in ("double", "float"):
        return float(v)
    return v


def finalize(a: AggCall, total: Any, nonnull: int) -> Any:
    """The aggregate's value from its running value and its count of non-NULL inputs (distinct
    ones for a DISTINCT aggregate), as Spark computes it: SUM of no values is NULL, AVG is the
    sum over the count (DECIMAL rounded half-up to Spark's intermediate and result scales), MIN
    and MAX the kept extreme."""
    if a.kind == "count":
        return nonnull
    if nonnull == 0:
        return None
    if a.kind in ("min", "max"):
        return total
    if a.kind == "sum":
        if a.dtype in _INT_RANGE:
            return fit(int(total), a.dtype, "sum")
        if a.dtype.startswith("decimal"):
            return fit(Decimal(total), a.dtype, "sum")
        return float(total)
    # avg
    d = decimal_type(a.input_dtype)
    if d is None:
        return float(total) / nonnull
    p, s = d
    sum_p, sum_s = min(38, p + 10), s
    # Spark: Divide(sum, CAST(count AS DECIMAL(20,0))) at DecimalPrecision's result scale, then
    # a cast to AVG's type (both round half-up).
    scale = max(6, sum_s + 20 + 1)
    precision = sum_p - sum_s + 0 + scale
    if precision > 38:
        int_digits = precision - scale
        scale = max(38 - int_digits, min(scale, 6))
    with localcontext(WIDE_DECIMALS):
        q = (Decimal(total) / Decimal(nonnull)).quantize(
            Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP
        )
    return fit(q, a.dtype, "avg")


def finisher(a: AggCall) -> Callable[[Any, int], Any]:
    """``finalize`` for ``a`` as a function of (running value, non-NULL count), the branches on
    the aggregate's kind and types taken once: an aggregate's output row is made per changed
    group. COUNT, MIN/MAX and integer SUM are specialized; the rest call ``finalize``."""
    if a.kind == "count":
        return lambda total, nonnull: nonnull
    if a.kind in ("min", "max"):
        return lambda total, nonnull: total if nonnull else None
    if a.kind == "sum" and a.dtype in _INT_RANGE:
        dtype = a.dtype
        return lambda total, nonnull: fit(int(total), dtype, "sum") if nonnull else None
    return lambda total, nonnull: finalize(a, total, nonnull)


def exact_zero(a: AggCall) -> Any:
    if a.kind in ("min", "max"):
        return None
    if agg_state_type(a) == "DOUBLE":
        return 0.0
    return Decimal(0) if agg_state_type(a).startswith("DECIMAL") else 0
