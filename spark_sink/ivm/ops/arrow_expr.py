"""Plan expressions as pyarrow compute expressions, for the columnar path of an epoch.

``arrow_expr`` translates the part of ``spark_sink.ivm.plan``'s expressions whose Arrow kernels
give exactly what Spark's evaluator (``spark_sink.ivm.expressions.compile_expr``) gives, and
refuses the rest with ``NotColumnar`` naming the construct (the row rule then keeps the view):

- column references and literals of BIGINT, INT, SMALLINT, TINYINT, STRING, BOOLEAN and DATE;
- AND, OR (Kleene: FALSE AND NULL is FALSE, TRUE OR NULL is TRUE), NOT;
- IS NULL, IS NOT NULL, ``<=>`` (NULL-safe equality);
- ``=``, ``<``, ``<=``, ``>``, ``>=`` between two of those values (NULL when either is NULL);
- ``IN`` of literals (NULL when the value is NULL, or when it is not found and a NULL literal
  is listed, as SQL says).

Left out on purpose, each because the kernel and Spark differ: DOUBLE and FLOAT (IEEE compares
NaN false; Spark orders NaN above every value and NaN = NaN is TRUE), DECIMAL (Arrow compares
decimals of different scales only after a cast it chooses), TIMESTAMP literals, arithmetic
(Spark's ANSI errors name the operation; Arrow's checked kernels raise their own), casts,
string functions, CASE. Strings compare by their UTF-8 bytes in both. Column names are
``col_name(id)``. Nothing here imports pyspark.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.zset import WeightOverflow
from spark_sink.ivm.plan import Attr, Call, Col, Expr, Lit

COLUMNAR_DTYPES = frozenset({"bigint", "int", "smallint", "tinyint", "string", "boolean", "date"})
_COMPARE = {"eq": "equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}


class NotColumnar(Exception):
    """A plan (or one expression of it) the columnar path does not take; ``str(e)`` says why."""


# What a columnar epoch may raise that hands it to the row rules (which decide it, and raise
# their own error where there is one): a refusal of ours, a weight leaving int64, an Arrow
# kernel's error, a ValueError of a kernel's check (schemas that do not line up).
HANDED_BACK: tuple[type[Exception], ...] = (
    NotColumnar,
    WeightOverflow,
    pa.ArrowException,
    ValueError,
)


def col_name(attr_id: int) -> str:
    """The Arrow column name of the plan column ``attr_id`` in a columnar Z-set."""
    return f"c{attr_id}"


def _literal(e: Lit) -> pa.Scalar:
    if e.dtype not in COLUMNAR_DTYPES:
        raise NotColumnar(f"a literal of type {e.dtype}")
    v = e.value
    if v is None:
        return pa.scalar(None, _arrow_type(e.dtype))
    if e.dtype == "date":
        if not isinstance(v, dt.date) or isinstance(v, dt.datetime):
            raise NotColumnar(f"a DATE literal held as {type(v).__name__}")
    return pa.scalar(v, _arrow_type(e.dtype))


def _arrow_type(dtype: str) -> pa.DataType:
    return {
        "bigint": pa.int64(),
        "int": pa.int32(),
        "smallint": pa.int16(),
        "tinyint": pa.int8(),
        "string": pa.string(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
    }[dtype]


def arrow_expr(e: Expr, attrs: dict[int, Attr]) -> pc.Expression:
    """``e`` over the columns ``attrs`` (id -> column) as a pyarrow compute expression with
    Spark's result for every row, NULLs included; ``NotColumnar`` when no such translation is
    known (the module docstring lists what is)."""
    if isinstance(e, Col):
        a = attrs.get(e.id)
        if a is None:
            raise NotColumnar(f"column #{e.id} is not an input here")
        if a.dtype not in COLUMNAR_DTYPES:
            raise NotColumnar(f"column {a.name} of type {a.dtype}")
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
        x = arrow_expr(v, attrs)
        vals = [i.value for i in items if i.value is not None]
        has_null = any(i.value is None for i in items)
        found = pc.is_in(x, pa.array(vals, _arrow_type(_dtype_of(v, attrs))))
        # SQL: NULL IN (...) is NULL; x IN (..., NULL) is NULL when x is not found
        null = pc.scalar(pa.scalar(None, pa.bool_()))
        miss = null if has_null else pc.scalar(False)
        return pc.if_else(pc.is_null(x), null, pc.if_else(found, pc.scalar(True), miss))
    raise NotColumnar(f"operator {op}")


def _dtype_of(e: Expr, attrs: dict[int, Attr]) -> str:
    if isinstance(e, Col):
        if e.id not in attrs:
            raise NotColumnar(f"column #{e.id} is not an input here")
        return attrs[e.id].dtype
    if isinstance(e, Lit | Call):
        return e.dtype
    raise NotColumnar(f"{type(e).__name__} outside an aggregate")


def _same_kind(e: Call, attrs: dict[int, Attr]) -> None:
    """Comparisons only between values of one family (Catalyst casts both sides to one type;
    a mix left here is refused rather than compared under Arrow's implicit casts)."""
    kinds = set()
    for x in e.args:
        d = _dtype_of(x, attrs)
        kinds.add("int" if d in ("bigint", "int", "smallint", "tinyint") else d)
    if len(kinds) > 1:
        raise NotColumnar(f"{e.op} between {' and '.join(sorted(kinds))}")
