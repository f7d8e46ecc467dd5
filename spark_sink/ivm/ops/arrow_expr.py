"""Plan expressions as pyarrow compute expressions, for the columnar path of an epoch.

``arrow_expr`` translates the part of ``spark_sink.ivm.plan``'s expressions whose Arrow kernels
give exactly what Spark's evaluator (``spark_sink.ivm.expressions.compile_expr``) gives, and
refuses the rest with ``NotColumnar`` naming the construct (the row rule then keeps the view):

- column references of BIGINT, INT, SMALLINT, TINYINT, STRING, BOOLEAN, DATE, DECIMAL and
  DOUBLE, and literals of those types;
- AND, OR (Kleene: FALSE AND NULL is FALSE, TRUE OR NULL is TRUE), NOT;
- IS NULL, IS NOT NULL, ``<=>`` (NULL-safe equality);
- ``=``, ``<``, ``<=``, ``>``, ``>=`` between two values of one integral family, two strings,
  booleans or dates, or two DECIMALs of one type (NULL when either is NULL);
- ``IN`` of literals (NULL when the value is NULL, or when it is not found and a NULL literal
  is listed, as SQL says);
- ``+``, ``-``, ``*``, unary ``-`` and ``abs`` of integral values (Arrow's ``*_checked`` kernels,
  then a checked cast to the type Spark gave the result) and of DECIMALs (exact: Arrow's result
  type is Spark's while it stays within 38 digits, refused past that); unary ``-`` and ``abs``
  of DOUBLEs;
- casts among integral types, from an integral type or a DECIMAL to a DECIMAL (rounded half
  away from zero when the scale drops, as Spark's HALF_UP), from an integral type to DOUBLE or
  STRING;
- IF, CASE WHEN (a NULL condition is not true, in both) and COALESCE;
- the strict functions of ``spark_sink.ivm.functions`` whose entry carries an Arrow translation
  (date parts, ``datediff``, ``length``, ``substring`` at literal non-negative positions, the
  trims, ``startswith``/``endswith``/``contains`` of a literal).

ANSI errors: where Spark raises (overflow of an integral or DECIMAL result), the checked kernel
or the checked cast raises ``pyarrow.ArrowInvalid``, one of ``HANDED_BACK``; the epoch is then
handed to the row rules, which raise Spark's error (or, where a kernel was stricter than Spark,
give its result). So the columnar path never writes a value Spark would not have, and what it
refuses at build is only what would hand back often.

Left out on purpose, each because the kernel and Spark differ: comparisons of DOUBLE and FLOAT
(IEEE compares NaN false; Spark orders NaN above every value and NaN = NaN is TRUE), DOUBLE and
FLOAT arithmetic (Acero evaluated ``i * (-3.0 * x)`` as -0.0 where IEEE, Spark and pyarrow's
own kernel on arrays give NaN: x = 1e308, i = 0; tests/unit/test_arrow_expr.py found it), DECIMALs of different types compared (Arrow compares them only after a cast it
chooses), division and remainder (Spark's DECIMAL division scale and its DOUBLE result for
integers), casts from DECIMAL or DOUBLE to integral types or DOUBLE (truncation and rounding
differ), TIMESTAMP values, ``upper`` and ``lower`` (Arrow maps Unicode differently), ``concat``. Strings compare
by their UTF-8 bytes in both. Column names are ``col_name(id)``. Nothing here imports pyspark.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.expressions import decimal_type
from spark_sink.ivm.functions import BY_OP
from spark_sink.ivm.ops.zset import WeightOverflow
from spark_sink.ivm.plan import Attr, Call, Col, Expr, Lit

# The types a comparison, an IN list or a join key takes over Arrow (equal values have equal
# Arrow values, and Arrow orders them as Spark does).
COLUMNAR_DTYPES = frozenset({"bigint", "int", "smallint", "tinyint", "string", "boolean", "date"})
INTEGRAL = ("bigint", "int", "smallint", "tinyint")
_COMPARE = {"eq": "equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_ARITH = {"add": "add_checked", "sub": "subtract_checked", "mul": "multiply_checked"}
_MAX_DIGITS = 38  # DECIMAL128's precision, and Spark's


class NotColumnar(Exception):
    """A plan (or one expression of it) the columnar path does not take; ``str(e)`` says why."""


# What a columnar epoch may raise that hands it to the row rules (which decide it, and raise
# their own error where there is one): a refusal of ours, a weight leaving int64, an Arrow
# kernel's error (a checked kernel's overflow among them), a ValueError of a kernel's check
# (schemas that do not line up).
HANDED_BACK: tuple[type[Exception], ...] = (
    NotColumnar,
    WeightOverflow,
    pa.ArrowException,
    ValueError,
)


def col_name(attr_id: int) -> str:
    """The Arrow column name of the plan column ``attr_id`` in a columnar Z-set."""
    return f"c{attr_id}"


def arrow_type(dtype: str) -> pa.DataType:
    """The Arrow type of the plan type ``dtype`` on the columnar path (as the store decodes it);
    ``NotColumnar`` for a type the path does not evaluate."""
    fixed = {
        "bigint": pa.int64(),
        "int": pa.int32(),
        "smallint": pa.int16(),
        "tinyint": pa.int8(),
        "string": pa.string(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "double": pa.float64(),
    }.get(dtype)
    if fixed is not None:
        return fixed
    d = decimal_type(dtype)
    if d is None:
        raise NotColumnar(f"a value of type {dtype}")
    return pa.decimal128(*d)


def _literal(e: Lit) -> pa.Scalar:
    t = arrow_type(e.dtype)
    v = e.value
    if v is None:
        return pa.scalar(None, t)
    if e.dtype == "date" and (not isinstance(v, dt.date) or isinstance(v, dt.datetime)):
        raise NotColumnar(f"a DATE literal held as {type(v).__name__}")
    if pa.types.is_decimal(t) and not isinstance(v, Decimal | int):
        raise NotColumnar(f"a DECIMAL literal held as {type(v).__name__}")
    return pa.scalar(v, t)


def _cast(x: pc.Expression, dtype: str) -> pc.Expression:
    """``x`` as ``dtype``'s Arrow type, checked: a value that does not fit raises."""
    return x.cast(arrow_type(dtype), safe=True)


def arrow_expr(e: Expr, attrs: dict[int, Attr]) -> pc.Expression:
    """``e`` over the columns ``attrs`` (id -> column) as a pyarrow compute expression with
    Spark's result for every row, NULLs included; ``NotColumnar`` when no such translation is
    known (the module docstring lists what is). Where Spark raises an ANSI error, evaluating
    the expression raises ``pyarrow.ArrowInvalid`` (never a wrapped or rounded value)."""
    if isinstance(e, Col):
        a = attrs.get(e.id)
        if a is None:
            raise NotColumnar(f"column #{e.id} is not an input here")
        arrow_type(a.dtype)  # refuses a type the path does not evaluate
        return pc.field(col_name(e.id))
    if isinstance(e, Lit):
        return pc.scalar(_literal(e))
    if not isinstance(e, Call):
        raise NotColumnar(f"{type(e).__name__} outside an aggregate")
    op = e.op
    if op in ("and", "or"):
        a, b = (arrow_expr(x, attrs) for x in e.args)
        return pc.and_kleene(a, b) if op == "and" else pc.or_kleene(a, b)
    if op == "not":
        return pc.invert(arrow_expr(e.args[0], attrs))
    if op == "isnull":
        return pc.is_null(arrow_expr(e.args[0], attrs))
    if op == "isnotnull":
        return pc.is_valid(arrow_expr(e.args[0], attrs))
    if op in _COMPARE:
        _same_kind(e, attrs)
        a, b = (arrow_expr(x, attrs) for x in e.args)
        return getattr(pc, _COMPARE[op])(a, b)
    if op == "eqns":
        _same_kind(e, attrs)
        a, b = (arrow_expr(x, attrs) for x in e.args)
        both_null = pc.and_kleene(pc.is_null(a), pc.is_null(b))
        one_null = pc.or_kleene(pc.is_null(a), pc.is_null(b))
        return pc.if_else(one_null, both_null, pc.equal(a, b))
    if op == "in":
        v, *items = e.args
        if not all(isinstance(i, Lit) for i in items):
            raise NotColumnar("IN with a non-literal item")
        t = _dtype_of(v, attrs)
        _comparable(t)
        if any(i.dtype != t for i in items):
            raise NotColumnar(f"IN of {t} with items of another type")
        x = arrow_expr(v, attrs)
        vals = [i.value for i in items if i.value is not None]
        has_null = any(i.value is None for i in items)
        found = pc.is_in(x, pa.array(vals, arrow_type(t)))
        # SQL: NULL IN (...) is NULL; x IN (..., NULL) is NULL when x is not found
        null = pc.scalar(pa.scalar(None, pa.bool_()))
        miss = null if has_null else pc.scalar(False)
        return pc.if_else(pc.is_null(x), null, pc.if_else(found, pc.scalar(True), miss))
    if op in _ARITH:
        return _arithmetic(e, attrs)
    if op in ("neg", "abs"):
        return _sign(e, attrs)
    if op == "cast":
        return _cast_expr(e, attrs)
    if op == "if":
        p, t, f = e.args
        return pc.if_else(_true(arrow_expr(p, attrs)), _value(t, e, attrs), _value(f, e, attrs))
    if op == "case":
        # args: condition, value, condition, value, ..., the ELSE value; as nested IFs (Arrow's
        # case_when over strings crashed pyarrow 26 when two of them met in one expression)
        out = _value(e.args[-1], e, attrs)
        for i in range(len(e.args) - 3, -1, -2):
            cond = _true(arrow_expr(e.args[i], attrs))
            out = pc.if_else(cond, _value(e.args[i + 1], e, attrs), out)
        return out
    if op == "coalesce":
        return pc.coalesce(*(_value(x, e, attrs) for x in e.args))
    fn = BY_OP.get(op)
    if fn is not None and fn.arrow is not None:
        out = fn.arrow([arrow_expr(x, attrs) for x in e.args], e.args)
        if out is not None:
            return out  # an Arrow kernel propagates NULL, as a strict function does
    raise NotColumnar(f"operator {op}")


def _true(cond: pc.Expression) -> pc.Expression:
    """A condition as IF and CASE read it: NULL is not true."""
    return pc.coalesce(cond, pc.scalar(False))


def _value(x: Expr, e: Call, attrs: dict[int, Attr]) -> pc.Expression:
    """A branch of IF, CASE or COALESCE as the type of ``e`` (Catalyst gave every branch that
    type; a NULL literal of another type is cast)."""
    out = result_dtype(e)
    value = arrow_expr(x, attrs)
    return value if _dtype_of(x, attrs) == out else _cast(value, out)


def _arithmetic(e: Call, attrs: dict[int, Attr]) -> pc.Expression:
    a_t, b_t = (_dtype_of(x, attrs) for x in e.args)
    a, b = (arrow_expr(x, attrs) for x in e.args)
    out = e.dtype
    if out in INTEGRAL and a_t in INTEGRAL and b_t in INTEGRAL:
        return _cast(getattr(pc, _ARITH[e.op])(a, b), out)
    da, db, do = decimal_type(a_t), decimal_type(b_t), decimal_type(out)
    if da is None or db is None or do is None:
        raise NotColumnar(f"{e.op} of {a_t} and {b_t} into {out}")
    (p1, s1), (p2, s2) = da, db
    if e.op == "mul":
        digits, scale = p1 + p2 + 1, s1 + s2
    else:
        scale = max(s1, s2)
        digits = max(p1 - s1, p2 - s2) + scale + 1
    if digits > _MAX_DIGITS:
        # Spark trims the scale and rounds there; Arrow refuses the type
        raise NotColumnar(f"{e.op} of {a_t} and {b_t} past {_MAX_DIGITS} digits")
    return _rescale(getattr(pc, _ARITH[e.op])(a, b), digits, scale, out)


def _rescale(x: pc.Expression, digits: int, scale: int, out: str) -> pc.Expression:
    """The DECIMAL(``digits``, ``scale``) ``x`` as DECIMAL ``out``: rounded half away from zero
    (Spark's HALF_UP) where the scale drops; a value past ``out``'s precision raises."""
    d = decimal_type(out)
    assert d is not None
    if d[1] < scale:
        # Rounding may carry into a new digit (999.999 -> 1000.00), which Arrow's round drops
        # silently when its type has no room: round within one more digit.
        if digits >= _MAX_DIGITS:
            raise NotColumnar(f"a DECIMAL of {digits} digits rounded to {out}")
        x = x.cast(pa.decimal128(digits + 1, scale))
        x = pc.round(x, ndigits=d[1], round_mode="half_towards_infinity")
    return _cast(x, out)


def _sign(e: Call, attrs: dict[int, Attr]) -> pc.Expression:
    t = _dtype_of(e.args[0], attrs)
    x = arrow_expr(e.args[0], attrs)
    if t in INTEGRAL and e.dtype in INTEGRAL:
        f = pc.negate_checked if e.op == "neg" else pc.abs_checked
        return _cast(f(x), e.dtype)
    if t == e.dtype and (t == "double" or decimal_type(t) is not None):
        return pc.negate(x) if e.op == "neg" else pc.abs(x)  # exact: no new digit
    raise NotColumnar(f"{e.op} of {t} into {e.dtype}")


def _cast_expr(e: Call, attrs: dict[int, Attr]) -> pc.Expression:
    to, src = e.dtype.split("|")
    x = arrow_expr(e.args[0], attrs)
    if to == src:
        return x
    if to in INTEGRAL and src in INTEGRAL:
        return _cast(x, to)
    d_to, d_src = decimal_type(to), decimal_type(src)
    if d_to is not None and src in INTEGRAL:
        if d_to[1] > _MAX_DIGITS - 19:
            raise NotColumnar(f"a cast from {src} to {to}")
        # through the widest DECIMAL of the target's scale (Arrow wants room for any int64)
        return _cast(x.cast(pa.int64()).cast(pa.decimal128(_MAX_DIGITS, d_to[1])), to)
    if d_to is not None and d_src is not None:
        return _rescale(x, d_src[0], d_src[1], to)
    if to == "double" and src in INTEGRAL:
        return x.cast(pa.float64(), safe=False)  # round to nearest, as Java's (double) long
    if to == "string" and src in INTEGRAL:
        return x.cast(pa.string())
    raise NotColumnar(f"a cast from {src} to {to}")


def result_dtype(e: Expr) -> str:
    """The plan type of a Call's result (a cast's type is its target's)."""
    assert isinstance(e, Call | Lit)
    return e.dtype.split("|")[0] if isinstance(e, Call) and e.op == "cast" else e.dtype


def _dtype_of(e: Expr, attrs: dict[int, Attr]) -> str:
    if isinstance(e, Col):
        if e.id not in attrs:
            raise NotColumnar(f"column #{e.id} is not an input here")
        return attrs[e.id].dtype
    if isinstance(e, Lit | Call):
        return result_dtype(e)
    raise NotColumnar(f"{type(e).__name__} outside an aggregate")


def _comparable(dtype: str) -> str:
    """The family a value of ``dtype`` compares within; ``NotColumnar`` for DOUBLE and FLOAT."""
    if dtype in INTEGRAL:
        return "int"
    if dtype in COLUMNAR_DTYPES or decimal_type(dtype) is not None:
        return dtype  # a DECIMAL compares with its own type only
    raise NotColumnar(f"a comparison of {dtype}")


def _same_kind(e: Call, attrs: dict[int, Attr]) -> None:
    """Comparisons only between values of one family (Catalyst casts both sides to one type;
    a mix left here is refused rather than compared under Arrow's implicit casts)."""
    kinds = {_comparable(_dtype_of(x, attrs)) for x in e.args}
    if len(kinds) > 1:
        raise NotColumnar(f"{e.op} between {' and '.join(sorted(kinds))}")
