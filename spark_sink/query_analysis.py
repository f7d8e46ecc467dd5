"""What a view's SQL query reads and produces, found by letting Spark analyze it.

The store's tables are registered as temporary views in the job's own Spark session
(``spark_sink.job_session``), so Spark resolves the query exactly as it will run it; the analyzed plan then names every temp view used
(subqueries included), and its output schema becomes the view table's schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from kvstore.errors import InvalidArgument, SchemaMismatch

_VIEW_REF = re.compile(r"View \(`([^`]+)`")
# Plan nodes that keep "one row in, at most one row out" above a global aggregate.
_PASS_THROUGH = {"Project", "Filter", "SubqueryAlias", "Sort", "Limit", "GlobalLimit", "LocalLimit"}


def mentioned_tables(query: str, names: list[str]) -> list[str]:
    """Store tables whose name appears as a word in ``query`` (a superset of what it reads;
    Spark's analysis narrows it down)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return [n for n in names if n.lower() in words]


def _analyzed(df: DataFrame):
    return df._jdf.queryExecution().analyzed()


def source_tables(df: DataFrame, candidates: list[str]) -> list[str]:
    """The candidate tables the analyzed query reads (in the order first seen)."""
    used = _VIEW_REF.findall(_analyzed(df).toString())
    lower = {c.lower(): c for c in candidates}
    out = []
    for name in used:
        c = lower.get(name.lower())
        if c is not None and c not in out:
            out.append(c)
    return out


_MULTIPLYING = {"Join", "Generate", "Expand"}


def rows_bounded_by_inputs(df: DataFrame) -> bool:
    """True if the query's optimized plan has no node that can make more rows than it reads (a
    join, an explode, grouping sets): its result is then no larger than its sources."""
    stack = [df._jdf.queryExecution().optimizedPlan()]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() in _MULTIPLYING:
            return False
        children = node.children()
        stack += [children.apply(i) for i in range(children.size())]
    return True


def is_global_aggregate(df: DataFrame) -> bool:
    """True if the query is an aggregate without GROUP BY (exactly one row, no natural key)."""
    node = _analyzed(df)
    while True:
        kind = node.getClass().getSimpleName()
        if kind == "Aggregate":
            return node.groupingExpressions().isEmpty()
        if kind not in _PASS_THROUGH or node.children().size() != 1:
            return False
        node = node.children().head()


def _ddl_type(view: str, name: str, t: T.DataType) -> str:
    if isinstance(t, T.LongType):
        return "BIGINT"
    if isinstance(t, T.IntegerType | T.ShortType | T.ByteType):
        return "INT"
    if isinstance(t, T.DoubleType | T.FloatType):
        return "DOUBLE"
    if isinstance(t, T.DecimalType):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, T.TimestampType | T.TimestampNTZType):
        return "TIMESTAMP"
    for cls, ddl in (
        (T.BooleanType, "BOOLEAN"),
        (T.StringType, "STRING"),
        (T.DateType, "DATE"),
        (T.BinaryType, "BINARY"),
    ):
        if isinstance(t, cls):
            return ddl
    raise SchemaMismatch(
        f"view {view!r} column {name!r}: Spark type {t.simpleString()} has no snapview "
        "equivalent (cast it to BIGINT, INT, DOUBLE, DECIMAL, BOOLEAN, STRING, DATE, "
        "TIMESTAMP or BINARY in the query)"
    )


@dataclass(frozen=True)
class ViewShape:
    """The view table a query produces."""

    ddl: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]  # () for a one-row view (a global aggregate)
    sources: tuple[str, ...]
    one_row: bool


def view_shape(
    view: str,
    df: DataFrame,
    candidates: list[str],
    primary_key: list[str] | None,
) -> ViewShape:
    """Schema, key and sources of the view ``view`` defined by ``df``.

    The key is ``primary_key`` if given, else the first column; a global aggregate without an
    explicit key becomes a one-row view (hidden fixed key)."""
    fields = df.schema.fields
    names = [f.name for f in fields]
    if len(set(n.lower() for n in names)) != len(names):
        raise SchemaMismatch(
            f"view {view!r}: the query's output columns {names} are not unique; name them "
            "(AS ...) or set column_names"
        )
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
            raise SchemaMismatch(
                f"view {view!r}: output column {n!r} is not a plain identifier; alias it "
                "(AS name) or set column_names"
            )
    ddl = ", ".join(f"{f.name} {_ddl_type(view, f.name, f.dataType)}" for f in fields)
    one_row = False
    if primary_key:
        for k in primary_key:
            if k not in names:
                raise InvalidArgument(
                    f"view {view!r}: primary key column {k!r} is not an output column of the "
                    f"query ({', '.join(names)})"
                )
        pk = tuple(primary_key)
    elif is_global_aggregate(df):
        pk, one_row = (), True
    else:
        pk = (names[0],)
    sources = source_tables(df, candidates)
    if not sources:
        raise InvalidArgument(f"view {view!r}: the query reads no snapview table")
    return ViewShape(ddl, tuple(names), pk, tuple(sources), one_row)
