"""A view's query tree (``spark_sink.ivm.plan``) from Spark's optimized logical plan (never from
the SQL text).

``delta_plan(df)`` walks the plan through py4j and returns the tree (Scan, Filter, Project, Join,
Aggregate, Union, Window) with expressions in a small closed language (``Col``, ``Lit``,
``Call``). Anything outside it raises ``Unsupported`` with a reason that names the construct, so
whatever Spark accepts is either maintained incrementally or named as the reason it is not. A
new operator adds its arm here (``_node_of``) and its node type in ``plan``.

The plan is the *optimized* one: Spark has then pushed filters below joins, pruned columns,
split join conditions into equalities and rewritten subqueries. The session that analyzes must
not push filters into the data source (``spark.sql.python.filterPushdown.enabled=false``): a
filter the source absorbed would vanish from the plan.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spark_sink.ivm.functions import BY_CATALYST
from spark_sink.ivm.plan import (
    AggCall,
    AggRef,
    Aggregate,
    Attr,
    CalendarInterval,
    Call,
    Col,
    Expr,
    Filter,
    GroupRef,
    Join,
    Lit,
    Node,
    Project,
    ScalarFilter,
    Scan,
    SemiJoin,
    TopK,
    Union,
    Unsupported,
    Window,
    output,
    prune_scans,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

JObject = Any  # a py4j handle on a JVM object (Catalyst plans and expressions)

EPOCH_DAY = dt.date(1970, 1, 1)
EPOCH_TS = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# ---------------------------------------------------------------------- from Catalyst


def _name(j) -> str:
    return str(j.getClass().getSimpleName())


def _seq(s) -> list:
    return [s.apply(i) for i in range(s.size())]


def _attr(a) -> Attr:
    return Attr(
        int(a.exprId().id()), str(a.name()), str(a.dataType().simpleString()), bool(a.nullable())
    )


_BINARY = {
    "And": "and",
    "Or": "or",
    "EqualTo": "eq",
    "EqualNullSafe": "eqns",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "Add": "add",
    "Subtract": "sub",
    "Multiply": "mul",
    "Divide": "div",
    "Remainder": "mod",
}
_UNARY = {
    "Not": "not",
    "IsNull": "isnull",
    "IsNotNull": "isnotnull",
    "UnaryMinus": "neg",
    "Abs": "abs",
}
# Wrappers the optimizer adds that do not change a value we compute (join keys and grouping
# keys of DOUBLE are normalized: -0.0 becomes 0.0, every NaN the same NaN).
_TRANSPARENT = {"KnownFloatingPointNormalized", "KnownNotNull", "KnownNullable"}
_CAST_TYPES = (
    "bigint",
    "int",
    "smallint",
    "tinyint",
    "double",
    "float",
    "decimal",
    "string",
    "boolean",
    "date",
    "timestamp",
)


class ConversionFailed(Unsupported):
    """An internal error while converting Catalyst's plan (a construct this module meant to
    handle but could not): ``str(e)`` names the construct and the error. Under ``auto`` the view
    falls back to full recompute with this reason; it never crashes ``build()``."""


def _describe(j: JObject) -> str:
    """A Catalyst expression or plan node for an error message: its SQL (cut), else its class."""
    try:
        text = str(j.sql())
    except Exception:  # noqa: BLE001 - only for a message: the class name is enough
        text = ""
    kind = _name(j)
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{text} ({kind})" if text else kind


@contextmanager
def _internal_errors_name(construct: Callable[[], str]) -> Iterator[None]:
    """Turn any error but Unsupported raised inside into ConversionFailed naming
    ``construct()`` (the innermost construct: an outer one lets ConversionFailed through)."""
    try:
        yield
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - any internal error names its construct
        raise ConversionFailed(
            f"an internal error converting {construct()}: {type(e).__name__}: {e}", code="INTERNAL"
        ) from e


def literal_value(j: JObject) -> Any:
    """A Catalyst Literal's value as the Python value our rows carry: int (BIGINT, INT,
    SMALLINT, TINYINT), float (DOUBLE, FLOAT), Decimal (DECIMAL of any precision, at its scale),
    str, bool, bytes (BINARY), datetime.date (DATE), an aware UTC datetime.datetime (TIMESTAMP
    and TIMESTAMP_NTZ, as the store reads a TIMESTAMP column), datetime.timedelta (a day-time
    INTERVAL), int months (a year-month INTERVAL), CalendarInterval (the legacy INTERVAL), and
    None for a NULL of any type."""
    v = j.value()
    t = str(j.dataType().simpleString())
    if v is None:
        return None
    if t == "string":
        return str(v.toString())
    if t.startswith("decimal"):
        # py4j hands a java.math.BigDecimal over as a Python Decimal (scale kept).
        big = v.toJavaBigDecimal()
        return big if isinstance(big, decimal.Decimal) else decimal.Decimal(str(big.toString()))
    if t == "date":
        return EPOCH_DAY + dt.timedelta(days=int(v))
    if t in ("timestamp", "timestamp_ntz"):
        return EPOCH_TS + dt.timedelta(microseconds=int(v))
    if t in ("bigint", "int", "smallint", "tinyint"):
        return int(v)
    if t in ("double", "float"):
        return float(v)
    if t == "boolean":
        return bool(v)
    if t == "binary":
        return bytes(v)
    if t.startswith("interval year") or t == "interval month":
        return int(v)  # months
    if t.startswith("interval") and t != "interval":
        return dt.timedelta(microseconds=int(v))  # day-time: microseconds
    if t == "interval":
        from py4j.java_gateway import get_field  # type: ignore[import-untyped]  # JVM fields

        return CalendarInterval(*(int(get_field(v, f)) for f in ("months", "days", "microseconds")))
    raise Unsupported(f"a literal of type {t} is not maintained incrementally", code="EXPRESSION")


def _internal_value(v: Any, t: str) -> Any:
    """A value of Catalyst's internal representation (an InSet's members) of type ``t`` as
    the Python value our rows carry."""
    if v is None:
        return None
    if t == "string":
        return str(v.toString())
    if t in ("bigint", "int", "smallint", "tinyint"):
        return int(v)
    if t == "date":
        return EPOCH_DAY + dt.timedelta(days=int(v))
    if t.startswith("decimal"):
        big = v.toJavaBigDecimal()
        return big if isinstance(big, decimal.Decimal) else decimal.Decimal(str(big.toString()))
    if t == "boolean":
        return bool(v)
    raise Unsupported(
        f"IN with a long list of {t} values is not maintained incrementally", code="EXPRESSION"
    )


# Date and timestamp arithmetic (the session's time zone is UTC: a day is 24 hours).
_DATETIME = {
    "DateAdd": "date_add",
    "DateSub": "date_sub",
    "AddMonths": "add_months",
    "DateAddYMInterval": "add_months",
    "TimestampAddYMInterval": "add_months",
    "TimestampAddInterval": "ts_add",
    "TimeAdd": "ts_add",
}
_UTC = ("UTC", "Etc/UTC", "Z", "+00:00", "GMT")


def _refuse_other_zones(j: JObject, tz: JObject | None) -> None:
    """Raise Unsupported (TIME_ZONE) if ``tz``, the Option of a zone id of expression ``j``,
    names a zone other than UTC (every zoned entry is defined on the UTC clock)."""
    if tz is not None and tz.isDefined() and str(tz.get()) not in _UTC:
        raise Unsupported(
            f"{j.prettyName()} in time zone {tz.get()} is not maintained incrementally",
            code="TIME_ZONE",
        )


class _Converter:
    """Catalyst expressions to ours; ``groups`` (Catalyst grouping expressions) are replaced by
    GroupRef and aggregate expressions by AggRef, inside an Aggregate's results."""

    def __init__(self, groups: list | None = None, scalars: dict | None = None) -> None:
        self.groups = groups
        self.scalars = scalars  # exprId of a scalar subquery -> the Col of its value
        self.aggs: list[AggCall] = []
        self._agg_keys: list = []  # the Catalyst AggregateExpressions behind self.aggs

    def expr(self, j: JObject) -> Expr:
        """Our expression for Catalyst expression ``j``; Unsupported naming the construct,
        ConversionFailed (naming it too) for an internal error."""
        with _internal_errors_name(lambda: f"expression {_describe(j)}"):
            return self._expr(j)

    def _expr(self, j: JObject) -> Expr:
        if self.groups is not None:
            for i, g in enumerate(self.groups):
                if j.semanticEquals(g):
                    return GroupRef(i)
        kind = _name(j)
        if kind == "AggregateExpression":
            if self.groups is None:
                raise Unsupported(
                    "an aggregate outside GROUP BY is not maintained incrementally",
                    code="AGGREGATE",
                )
            return self.aggregate(j)
        if not j.deterministic():
            raise Unsupported(
                f"non-deterministic expression {j.prettyName()}() is not maintained incrementally",
                code="NONDETERMINISTIC",
            )
        dtype = str(j.dataType().simpleString())
        if kind == "AttributeReference":
            if self.groups is not None:
                raise Unsupported(
                    f"column {j.name()} in an aggregate's result is neither grouped nor aggregated",
                    code="AGGREGATE",
                )
            return Col(int(j.exprId().id()))
        if kind == "Alias":
            return self.expr(j.child())
        if kind == "Literal":
            return Lit(literal_value(j), dtype)
        if kind == "ScalarSubquery":
            col = (self.scalars or {}).get(int(j.exprId().id()))
            if col is None:
                raise Unsupported(
                    "a scalar subquery outside WHERE or HAVING is not maintained incrementally",
                    code="SUBQUERY",
                )
            return col
        if kind in _TRANSPARENT:
            return self.expr(j.child())
        if kind in _BINARY:
            return Call(_BINARY[kind], (self.expr(j.left()), self.expr(j.right())), dtype)
        if kind in _UNARY:
            return Call(_UNARY[kind], (self.expr(j.child()),), dtype)
        if kind in ("Cast", "AnsiCast"):
            if not any(dtype.startswith(t) for t in _CAST_TYPES):
                raise Unsupported(
                    f"a cast to {dtype} is not maintained incrementally", code="EXPRESSION"
                )
            src = str(j.child().dataType().simpleString())
            tz = j.timeZoneId()
            zoned = "timestamp" in (src, dtype)
            if zoned and tz.isDefined() and str(tz.get()) not in _UTC:
                raise Unsupported(
                    f"a cast from {src} to {dtype} in time zone {tz.get()} is not maintained "
                    "incrementally",
                    code="TIME_ZONE",
                )
            return Call("cast", (self.expr(j.child()),), dtype + "|" + src)
        if kind == "In":
            items = _seq(j.list())
            if any(_name(i) != "Literal" for i in items):
                raise Unsupported(
                    "IN with a non-literal list is not maintained incrementally", code="EXPRESSION"
                )
            return Call("in", (self.expr(j.value()), *(self.expr(i) for i in items)), dtype)
        if kind in _DATETIME:
            _refuse_other_zones(
                j, j.timeZoneId() if kind.startswith(("Timestamp", "Time")) else None
            )
            operands = tuple(self.expr(c) for c in _seq(j.children()))
            return Call(_DATETIME[kind], operands, dtype)
        if kind == "InSet":  # an IN list past spark.sql.optimizer.inSetConversionThreshold
            t = str(j.child().dataType().simpleString())
            items = [Lit(_internal_value(v, t), t) for v in _seq(j.hset().toSeq())]
            return Call("in", (self.expr(j.child()), *items), dtype)
        if kind == "Coalesce":
            return Call("coalesce", tuple(self.expr(c) for c in _seq(j.children())), dtype)
        if kind == "If":
            return Call(
                "if",
                (self.expr(j.predicate()), self.expr(j.trueValue()), self.expr(j.falseValue())),
                dtype,
            )
        if kind == "CaseWhen":
            args = []
            for b in _seq(j.branches()):
                args += [self.expr(b._1()), self.expr(b._2())]
            default = j.elseValue()
            args.append(self.expr(default.get()) if default.isDefined() else Lit(None, dtype))
            return Call("case", tuple(args), dtype)
        fn = BY_CATALYST.get(kind)
        if fn is not None:
            children = _seq(j.children())
            types = tuple(str(c.dataType().simpleString()) for c in children)
            if not fn.accepts(types, dtype):
                raise Unsupported(
                    f"{j.prettyName()} of {', '.join(types)} is not maintained incrementally",
                    code="EXPRESSION",
                )
            _refuse_other_zones(j, j.timeZoneId() if fn.zoned else None)
            return Call(fn.op, tuple(self.expr(c) for c in children), dtype)
        if kind == "Like":
            pattern = j.right()
            if _name(pattern) != "Literal":
                raise Unsupported(
                    "LIKE with a non-literal pattern is not maintained incrementally",
                    code="EXPRESSION",
                )
            return Call(
                "like",
                (self.expr(j.left()), self.expr(pattern), Lit(str(j.escapeChar()), "string")),
                dtype,
            )
        raise Unsupported(
            f"expression {j.prettyName()} is not maintained incrementally", code="EXPRESSION"
        )

    def aggregate(self, j: JObject) -> AggRef:
        for i, k in enumerate(self._agg_keys):
            if j.semanticEquals(k):
                return AggRef(i)
        f = j.aggregateFunction()
        fname = str(f.prettyName())
        if j.filter().isDefined():
            raise Unsupported(
                f"{fname.upper()}(...) FILTER (WHERE ...) is not maintained incrementally",
                code="AGGREGATE",
            )
        kind = {"Count": "count", "Sum": "sum", "Average": "avg", "Min": "min", "Max": "max"}.get(
            _name(f)
        )
        if kind is None:
            raise Unsupported(
                f"aggregate {fname}() is not maintained incrementally", code="AGGREGATE"
            )
        if fname.startswith("try_"):
            raise Unsupported(
                f"aggregate {fname}() is not maintained incrementally", code="AGGREGATE"
            )
        plain = _Converter()
        args = tuple(plain.expr(c) for c in _seq(f.children()))
        distinct = bool(j.isDistinct()) and kind not in ("min", "max")  # the same either way
        if distinct and len(args) != 1:
            raise Unsupported(
                f"{fname.upper()}(DISTINCT ...) of {len(args)} columns is not maintained "
                "incrementally",
                code="AGGREGATE",
            )
        in_type = str(_seq(f.children())[0].dataType().simpleString()) if args else ""
        call = AggCall(kind, args, str(f.dataType().simpleString()), in_type, distinct)
        self.aggs.append(call)
        self._agg_keys.append(j)
        return AggRef(len(self.aggs) - 1)


_JOIN_KINDS = {"Inner": "inner", "LeftOuter": "left", "RightOuter": "right", "FullOuter": "full"}


_SEMI_KINDS = {"LeftSemi": False, "LeftAnti": True}  # -> anti


def _join_condition(j, left: Node, right: Node, jt: str) -> tuple[list, list, Expr | None]:
    """A Catalyst join's condition as (left key ids, right key ids, residual): the equalities
    between a column of each side, then the rest ANDed (None when nothing is left)."""
    lids = {a.id for a in output(left)}
    rids = {a.id for a in output(right)}
    lk, rk, rest = [], [], []
    cond = j.condition()
    for c in _split_and(cond.get()) if cond.isDefined() else []:
        if jt == "LeftAnti" and _null_aware(c):
            raise Unsupported(
                "NOT IN over a column that may be NULL (a null-aware anti join: one NULL "
                "on either side changes every row's answer) is not maintained incrementally; "
                "NOT EXISTS, or NOT IN over NOT NULL columns, is",
                code="NULL_AWARE_ANTI_JOIN",
            )
        e = _Converter().expr(c)
        if isinstance(e, Call) and e.op == "eq" and all(isinstance(a, Col) for a in e.args):
            a, b = e.args
            if a.id in lids and b.id in rids:
                lk.append(a.id)
                rk.append(b.id)
                continue
            if a.id in rids and b.id in lids:
                lk.append(b.id)
                rk.append(a.id)
                continue
        rest.append(e)
    if not lk:
        raise Unsupported(
            "a join without an equality between a column of each side (a cross join or a "
            "join on computed keys) is not maintained incrementally",
            code="JOIN",
        )
    residual = None
    for e in rest:
        residual = e if residual is None else Call("and", (residual, e), "boolean")
    return lk, rk, residual


def _null_aware(c) -> bool:
    """Whether ``c`` is NOT IN's ``(a = b) OR isnull(a = b)`` (Spark keeps it where a side may
    be NULL)."""
    return _name(c) == "Or" and any(_name(x) == "IsNull" for x in (c.left(), c.right()))


def _semi_join(left: Node, right: Node, lk: list, rk: list, residual, jt: str) -> SemiJoin:
    floats = {a.id for a in output(left) if a.dtype in ("double", "float")}
    if floats & set(lk):
        raise Unsupported(
            "a semi or anti join on a DOUBLE or FLOAT key is not maintained incrementally",
            code="JOIN",
        )
    return SemiJoin(left, right, tuple(lk), tuple(rk), residual, _SEMI_KINDS[jt])


def scalar_subqueries(j: JObject) -> list[JObject]:
    """The ScalarSubquery expressions of plan node ``j``'s expressions, in pre-order (the
    order of a ScalarFilter's ``subs`` and of their plans among the Catalyst nodes)."""
    out = []
    for e in _seq(j.expressions()):
        stack = [e]
        while stack:
            x = stack.pop()
            if _name(x) == "ScalarSubquery":
                out.append(x)
                continue
            stack.extend(reversed(_seq(x.children())))
    return out


def _scalar_filter(j, subqueries: list, tables_of) -> ScalarFilter:
    """A Filter reading uncorrelated scalar subqueries, each a global aggregate (one row)."""
    subs, scalars = [], {}
    for sq in subqueries:
        if not sq.outerAttrs().isEmpty():
            raise Unsupported(
                "a correlated scalar subquery Spark kept is not maintained incrementally",
                code="SUBQUERY",
            )
        sub = _node(sq.plan(), tables_of)
        if not isinstance(sub, Aggregate) or sub.groups or len(sub.columns()) != 1:
            raise Unsupported(
                "a scalar subquery other than one global aggregate (MAX, SUM, AVG ... of a "
                "query) is not maintained incrementally",
                code="SUBQUERY",
            )
        subs.append(sub)
        scalars[int(sq.exprId().id())] = Col(sub.columns()[0].id)
    cond = _Converter(scalars=scalars).expr(j.condition())
    return ScalarFilter(cond, tuple(subs), _node(j.child(), tables_of))


def _split_and(j) -> list:
    if _name(j) == "And":
        return _split_and(j.left()) + _split_and(j.right())
    return [j]


def _refs(j) -> set[int]:
    return {int(a.exprId().id()) for a in _seq(j.references().toSeq())}


def _node(j, tables_of) -> Node:
    """Our tree for Catalyst plan node ``j``; an internal error names the node
    (ConversionFailed)."""
    with _internal_errors_name(lambda: f"plan node {_name(j)}"):
        return _node_of(j, tables_of)


def _node_of(j, tables_of) -> Node:
    kind = _name(j)
    if kind in ("DataSourceV2ScanRelation", "DataSourceV2Relation"):
        rel = j.relation() if kind == "DataSourceV2ScanRelation" else j
        table = rel.options().get("table")
        if table is None:
            raise Unsupported("a relation that is not a snapview table", code="SOURCE")
        return Scan(tables_of(str(table)), tuple(_attr(a) for a in _seq(j.output())))
    if kind in ("SubqueryAlias", "View"):
        return _node(j.child(), tables_of)
    if kind == "Filter":
        subqueries = scalar_subqueries(j)
        if subqueries:
            return _scalar_filter(j, subqueries, tables_of)
        return Filter(_Converter().expr(j.condition()), _node(j.child(), tables_of))
    if kind == "Project":
        conv = _Converter()
        outs = tuple((_attr(e.toAttribute()), conv.expr(e)) for e in _seq(j.projectList()))
        return Project(outs, _node(j.child(), tables_of))
    if kind == "Sort":
        return _node(j.child(), tables_of)  # a view is a set of rows: order is not kept
    if kind == "Join":
        jt = str(j.joinType().toString())
        if jt not in _JOIN_KINDS and jt not in _SEMI_KINDS:
            raise Unsupported(f"a {jt} join is not maintained incrementally", code="JOIN")
        left, right = _node(j.left(), tables_of), _node(j.right(), tables_of)
        lk, rk, residual = _join_condition(j, left, right, jt)
        if jt in _SEMI_KINDS:
            return _semi_join(left, right, lk, rk, residual, jt)
        kind = _JOIN_KINDS[jt]
        if kind != "inner" and residual is not None:
            raise Unsupported(
                f"a {kind.upper()} OUTER join with a condition beyond column equalities is not "
                "maintained incrementally",
                code="JOIN",
            )
        return Join(left, right, tuple(lk), tuple(rk), residual, kind)
    if kind == "Aggregate":
        groups = _seq(j.groupingExpressions())
        plain = _Converter()
        gexprs = tuple(plain.expr(g) for g in groups)
        conv = _Converter(groups)
        outs = tuple((_attr(e.toAttribute()), conv.expr(e)) for e in _seq(j.aggregateExpressions()))
        return Aggregate(
            gexprs,
            tuple(str(g.dataType().simpleString()) for g in groups),
            tuple(conv.aggs),
            outs,
            _node(j.child(), tables_of),
        )
    if kind == "Window":
        return _window(j, tables_of)
    if kind == "WindowGroupLimit":  # an optimization of a TopK filter above: the filter stays
        return _node(j.child(), tables_of)
    if kind == "GlobalLimit":
        return _top_k(j, tables_of)
    if kind in ("LocalLimit", "Limit", "Offset"):
        raise Unsupported(f"{kind} without ORDER BY is not maintained incrementally", code="LIMIT")
    if kind == "Union":
        if j.byName() or j.allowMissingCol():
            raise Unsupported("UNION BY NAME is not maintained incrementally", code="PLAN_NODE")
        children = tuple(_node(c, tables_of) for c in _seq(j.children()))
        return Union(tuple(_attr(a) for a in _seq(j.output())), children)
    if kind in ("Intersect", "Except"):
        raise Unsupported(f"{kind.upper()} is not maintained incrementally", code="PLAN_NODE")
    if kind == "Expand":
        raise Unsupported(
            "GROUPING SETS / ROLLUP / CUBE are not maintained incrementally", code="PLAN_NODE"
        )
    if kind == "LocalRelation" or kind == "OneRowRelation":
        raise Unsupported(
            "a query over literal rows (VALUES) is not maintained incrementally", code="PLAN_NODE"
        )
    raise Unsupported(f"plan node {kind} is not maintained incrementally", code="PLAN_NODE")


def _top_k(j, tables_of) -> Node:
    """``GlobalLimit n (LocalLimit n (Project* (Sort order child)))``, as Spark plans ORDER BY
    ... LIMIT n: a TopK over the Sort's child, the Projects (which keep the row count) above
    it. LIMIT without ORDER BY (Spark keeps whichever rows come first) and OFFSET are
    refused."""
    limit = j.limitExpr()
    local = j.child()
    if _name(limit) != "Literal" or _name(local) != "LocalLimit":
        raise Unsupported(
            "a LIMIT that is not a literal is not maintained incrementally", code="LIMIT"
        )
    n = int(limit.value())
    projects = []
    node = local.child()
    while _name(node) == "Project":
        projects.append(node)
        node = node.child()
    if _name(node) != "Sort" or not bool(getattr(node, "global")()):  # a keyword in Python
        raise Unsupported("LIMIT without ORDER BY is not maintained incrementally", code="LIMIT")
    child = _node(node.child(), tables_of)
    conv = _Converter()
    order = tuple(
        (conv.expr(o.child()), bool(o.isAscending()), str(o.nullOrdering().sql()) == "NULLS FIRST")
        for o in _seq(node.order())
    )
    out: Node = TopK(order, n, child)
    for p in reversed(projects):
        pconv = _Converter()
        outs = tuple((_attr(e.toAttribute()), pconv.expr(e)) for e in _seq(p.projectList()))
        out = Project(outs, out)
    return out


def delta_plan(df: DataFrame, tables_of: Callable[[str], str] = lambda name: name) -> Node:
    """The query of ``df`` as a delta-rule tree. ``tables_of`` maps the data source's ``table``
    option to the table's name (identity by default). Raises Unsupported naming the construct.

    Supported: Filter and Project with deterministic expressions of the closed language above,
    inner and LEFT OUTER equi-joins, and Aggregates (COUNT, SUM, AVG, GROUP BY or global,
    DISTINCT) anywhere in the tree (a join looks one up by its grouping columns), and ranking
    window functions (ROW_NUMBER, RANK, DENSE_RANK) over PARTITION BY plain columns."""
    plan = df._jdf.queryExecution().optimizedPlan()
    return prune_scans(_node(plan, tables_of))


# Catalyst's ranking functions maintained by spark_sink.ivm.ops.window (by class name).
RANKING = {"RowNumber": "row_number", "Rank": "rank", "DenseRank": "dense_rank"}


def _window(j, tables_of) -> Window:
    """A Catalyst Window node: ranking functions over PARTITION BY plain columns; any other
    window function (aggregates OVER, lag, lead, ntile, ...) is refused by name."""
    funcs, bad = [], []
    for e in _seq(j.windowExpressions()):
        we = e.child() if _name(e) == "Alias" else e
        f = we.windowFunction() if _name(we) == "WindowExpression" else we
        kind = RANKING.get(_name(f))
        if kind is None:
            inner = f.aggregateFunction() if _name(f) == "AggregateExpression" else f
            bad.append(f"{inner.prettyName()}()")
            continue
        funcs.append((_attr(e.toAttribute()), kind))
    if bad:
        names = ", ".join(sorted(set(bad)))
        raise Unsupported(f"window function {names} is not maintained incrementally", code="WINDOW")
    names = ", ".join(f"{k}()" for _, k in funcs)
    child = _node(j.child(), tables_of)
    parts = []
    for p in _seq(j.partitionSpec()):
        while _name(p) in _TRANSPARENT:
            p = p.child()
        dtype = str(p.dataType().simpleString())
        if dtype in ("double", "float"):  # (the optimizer wraps it to normalize NaN and -0.0)
            cols = ", ".join(str(a.name()) for a in _seq(p.references().toSeq()))
            raise Unsupported(
                f"window function {names} partitioned by a {dtype.upper()} column ({cols}) is "
                "not maintained incrementally (NaN and -0.0 are not found by an equality lookup)",
                code="WINDOW",
            )
        if _name(p) != "AttributeReference":
            raise Unsupported(
                f"window function {names} partitioned by a computed expression is not "
                "maintained incrementally",
                code="WINDOW",
            )
        a = _attr(p)
        parts.append(a.id)
    if not parts:
        raise Unsupported(
            f"window function {names} without PARTITION BY is not maintained incrementally "
            "(every change would rank the whole input again)",
            code="WINDOW",
        )
    conv = _Converter()
    order = tuple(
        (conv.expr(o.child()), bool(o.isAscending()), str(o.nullOrdering().sql()) == "NULLS FIRST")
        for o in _seq(j.orderSpec())
    )
    return Window(tuple(funcs), tuple(parts), order, child)


def _catalyst_nodes(plan: JObject, kind: str) -> list[JObject]:
    """The nodes of class ``kind`` of a Catalyst plan, in pre-order."""
    out = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if _name(node) == kind:
            out.append(node)
        # a Filter's scalar subqueries after its child, as the tree's ScalarFilter inputs (no
        # other node's are taken: the converter refuses them)
        subplans = [sq.plan() for sq in scalar_subqueries(node)] if _name(node) == "Filter" else []
        stack.extend(reversed(_seq(node.children()) + subplans))
    return out


def catalyst_joins(plan: JObject) -> list[JObject]:
    """The Catalyst Joins of an optimized plan but its semi and anti joins (``SemiJoin``
    nodes), in pre-order (as ``joins`` numbers them: the nodes the tree passes through hold no
    join)."""
    return [
        j for j in _catalyst_nodes(plan, "Join") if str(j.joinType().toString()) not in _SEMI_KINDS
    ]


def catalyst_semi_joins(plan: JObject) -> list[JObject]:
    """The Catalyst semi and anti Joins of an optimized plan, in pre-order (as ``semi_joins``
    numbers the plan's ``SemiJoin`` nodes)."""
    return [j for j in _catalyst_nodes(plan, "Join") if str(j.joinType().toString()) in _SEMI_KINDS]


def catalyst_top_ks(plan: JObject) -> list[JObject]:
    """The Catalyst Sorts under the GlobalLimits of an optimized plan (ORDER BY ... LIMIT), in
    pre-order (as the plan's TopK nodes are numbered)."""
    out = []
    for g in _catalyst_nodes(plan, "GlobalLimit"):
        node = g.child().child()
        while _name(node) == "Project":
            node = node.child()
        out.append(node)
    return out


def catalyst_aggregates(plan: JObject) -> list[tuple[JObject, list[JObject], list[JObject]]]:
    """The Catalyst Aggregates of an optimized plan in pre-order, each as (child plan, grouping
    expressions, AggregateExpressions numbered as ``delta_plan`` numbers them)."""
    out = []
    for node in _catalyst_nodes(plan, "Aggregate"):
        groups = _seq(node.groupingExpressions())
        conv = _Converter(groups)
        for e in _seq(node.aggregateExpressions()):
            conv.expr(e)
        out.append((node.child(), groups, list(conv._agg_keys)))
    return out
