"""Spark's scalar functions as table entries, shared by the row evaluator
(``spark_sink.ivm.expressions.compile_expr``), its columnar twin
(``spark_sink.ivm.ops.arrow_expr``) and the plan converter (``spark_sink.ivm.catalyst``).

A function here is *strict*: a NULL argument makes a NULL result, so an entry gives only its
value on non-NULL arguments. Adding a function is one ``Function`` entry (the Catalyst class
names it comes from, the argument and result types it implements, its value, optionally its
Arrow translation) plus a test; nothing branches on its name elsewhere. Constructs that are not
strict (AND, OR, CASE, COALESCE, IN, IS NULL) or that dispatch on types in ways a table does not
say well (arithmetic, casts, comparisons) stay special forms in those modules.

Every entry follows Spark 4 in ANSI mode with the session time zone UTC (date parts of a DATE
need no zone; a TIMESTAMP argument reaches these functions through Catalyst's cast to DATE).
``accepts`` is checked when the plan is converted, on Catalyst's own argument types, so a
function applied to a type its entry does not implement is refused at build (the view falls
back under ``auto``), never evaluated wrongly.

An Arrow translation is given only where the kernel's result equals Spark's for every input;
it receives the arguments' Arrow expressions and the plan arguments (a literal argument may
specialize it) and returns None to decline (the row path then keeps the view).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.plan import Expr, Lit

ArrowFn = Callable[[list[pc.Expression], tuple[Expr, ...]], "pc.Expression | None"]


@dataclass(frozen=True)
class Function:
    """One strict scalar function: ``op`` is its name in plan Calls; ``catalyst`` the Catalyst
    expression classes converted to it (their children, in order, are its arguments);
    ``accepts(arg_types, result_type)`` whether this entry implements those Spark types;
    ``value(*args)`` its result on non-NULL arguments (raising ``EvalError`` where Spark
    raises); ``arrow`` its columnar translation, if any; ``zoned``: its value depends on the
    session time zone (the converter refuses a zone other than UTC, reason TIME_ZONE)."""

    op: str
    catalyst: tuple[str, ...]
    accepts: Callable[[tuple[str, ...], str], bool]
    value: Callable[..., Any]
    arrow: ArrowFn | None = None
    zoned: bool = False


def _types(*args: str, out: str) -> Callable[[tuple[str, ...], str], bool]:
    """Accepts exactly these argument types and this result type (``*`` matches any)."""

    def ok(got: tuple[str, ...], result: str) -> bool:
        if len(got) != len(args):
            return False
        pairs = [*zip(args, got, strict=True), (out, result)]
        return all(want in ("*", have) for want, have in pairs)

    return ok


def _strings(n: int, out: str) -> Callable[[tuple[str, ...], str], bool]:
    return _types(*(["string"] * n), out=out)


def _as_int32(x: pc.Expression) -> pc.Expression:
    return x.cast(pa.int32(), safe=True)


def _date_part(kernel: str) -> ArrowFn:
    """A date part over Arrow: the kernel's int64 as Spark's INT."""
    return lambda xs, _args: _as_int32(getattr(pc, kernel)(xs[0]))


def _utc_part(part: str, t: dt.datetime) -> int:
    """``t``'s hour, minute or second on the UTC clock (a TIMESTAMP arrives zone-aware)."""
    return int(getattr(t.astimezone(dt.UTC), part))


def _iso_weekday(d: dt.date) -> int:
    return d.isoweekday() % 7 + 1  # Spark's dayofweek: Sunday 1 ... Saturday 7


def substring_sql(s: str, pos: int, length: int) -> str:
    """Spark's ``substring(s, pos, len)`` (UTF8String.substringSQL) over code points: ``pos``
    is 1-based, 0 reads as 1, a negative ``pos`` counts from the end; a negative or zero
    ``len`` gives the empty string."""
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = start + length
    start = max(start, 0)
    return "" if start >= end else s[start:end]


def _substring_arrow(xs: list[pc.Expression], args: tuple[Expr, ...]) -> pc.Expression | None:
    # Arrow's slice counts a negative start from the end differently from Spark: only
    # literal, non-negative positions and lengths are translated.
    _, pos, length = args
    if not (isinstance(pos, Lit) and isinstance(length, Lit)):
        return None
    if pos.value is None or length.value is None:
        return None
    p, n = int(pos.value), int(length.value)  # type: ignore[call-overload]
    if p < 0 or n < 0:
        return None
    start = max(p - 1, 0)
    return pc.utf8_slice_codeunits(xs[0], start=start, stop=start + n)


def _trim(chars: str, side: str) -> Callable[[str], str]:
    strip = {"both": str.strip, "left": str.lstrip, "right": str.rstrip}[side]
    return lambda s: strip(s, chars)


def _trim_arrow(side: str) -> ArrowFn:
    kernel = {"both": pc.utf8_trim, "left": pc.utf8_ltrim, "right": pc.utf8_rtrim}[side]
    return lambda xs, _args: kernel(xs[0], characters=" ")


def _with_literal_pattern(kernel: Callable[..., pc.Expression]) -> ArrowFn:
    """A string test against a literal pattern (Arrow's kernels take the pattern as an
    option, not as a column): declined when the pattern is computed."""

    def translate(xs: list[pc.Expression], args: tuple[Expr, ...]) -> pc.Expression | None:
        pattern = args[1]
        if not isinstance(pattern, Lit) or pattern.value is None:
            return None
        return kernel(xs[0], pattern=str(pattern.value))

    return translate


def _concat_accepts(got: tuple[str, ...], result: str) -> bool:
    return result == "string" and len(got) >= 1 and all(t == "string" for t in got)


FUNCTIONS: tuple[Function, ...] = (
    # date parts of a DATE (Catalyst casts a TIMESTAMP argument to DATE in the session zone)
    Function("year", ("Year",), _types("date", out="int"), lambda d: d.year, _date_part("year")),
    Function(
        "quarter",
        ("Quarter",),
        _types("date", out="int"),
        lambda d: (d.month - 1) // 3 + 1,
        _date_part("quarter"),
    ),
    Function(
        "month", ("Month",), _types("date", out="int"), lambda d: d.month, _date_part("month")
    ),
    Function(
        "dayofmonth", ("DayOfMonth",), _types("date", out="int"), lambda d: d.day, _date_part("day")
    ),
    Function(
        "dayofyear",
        ("DayOfYear",),
        _types("date", out="int"),
        lambda d: d.timetuple().tm_yday,
        _date_part("day_of_year"),
    ),
    Function("dayofweek", ("DayOfWeek",), _types("date", out="int"), _iso_weekday),
    # time parts of a TIMESTAMP, in the session's zone (UTC: the wall clock of the UTC instant)
    *(
        Function(
            part,
            (part.capitalize(),),
            _types("timestamp", out="int"),
            functools.partial(_utc_part, part),
            _date_part(part),
            zoned=True,
        )
        for part in ("hour", "minute", "second")
    ),
    Function("weekday", ("WeekDay",), _types("date", out="int"), lambda d: d.weekday()),
    Function(
        "datediff",
        ("DateDiff",),
        _types("date", "date", out="int"),
        lambda end, start: (end - start).days,
        lambda xs, _args: _as_int32(pc.days_between(xs[1], xs[0])),
    ),
    # strings (code points, as Spark's UTF8String counts them)
    Function("upper", ("Upper",), _strings(1, "string"), str.upper),
    Function("lower", ("Lower",), _strings(1, "string"), str.lower),
    Function(
        "length",
        ("Length",),
        _strings(1, "int"),
        len,
        lambda xs, _args: _as_int32(pc.utf8_length(xs[0])),
    ),
    Function(
        "substring",
        ("Substring",),
        _types("string", "int", "int", out="string"),
        substring_sql,
        _substring_arrow,
    ),
    Function(
        "trim", ("StringTrim",), _strings(1, "string"), _trim(" ", "both"), _trim_arrow("both")
    ),
    Function(
        "ltrim", ("StringTrimLeft",), _strings(1, "string"), _trim(" ", "left"), _trim_arrow("left")
    ),
    Function(
        "rtrim",
        ("StringTrimRight",),
        _strings(1, "string"),
        _trim(" ", "right"),
        _trim_arrow("right"),
    ),
    Function("concat", ("Concat",), _concat_accepts, lambda *parts: "".join(parts)),
    Function(
        "startswith",
        ("StartsWith",),
        _strings(2, "boolean"),
        str.startswith,
        _with_literal_pattern(pc.starts_with),
    ),
    Function(
        "endswith",
        ("EndsWith",),
        _strings(2, "boolean"),
        str.endswith,
        _with_literal_pattern(pc.ends_with),
    ),
    Function(
        "contains",
        ("Contains",),
        _strings(2, "boolean"),
        str.__contains__,
        _with_literal_pattern(pc.match_substring),
    ),
)

BY_OP: dict[str, Function] = {f.op: f for f in FUNCTIONS}
BY_CATALYST: dict[str, Function] = {c: f for f in FUNCTIONS for c in f.catalyst}
