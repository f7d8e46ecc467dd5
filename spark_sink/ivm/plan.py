"""A view's query as a tree of the operators the delta rules know: the expressions (``Col``,
``Lit``, ``Call``, ``GroupRef``, ``AggRef``) and the node types (Scan, Filter, Project, Join,
Aggregate, Union, Window), each node with its inputs and its output columns.

The tree is made from Spark's optimized logical plan by ``spark_sink.ivm.catalyst``
(``delta_plan``); each node type's delta rule is its operator in ``spark_sink.ivm.ops``. Nothing
here imports pyspark or py4j. Columns are named by Spark's expression ids (``Attr.id``), which are
unique in one plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import get_args

# Why a view is not maintained incrementally, as a stable code (``Unsupported.code``, shown by
# ``explain()`` as ``why: [CODE] message``; docs/design.md §6.4 lists them). A message may be
# reworded; a code is kept, so tools may match on it.
REASON_CODES = {
    "ASKED": "strategy full_recompute was asked for",
    "PLAN_NODE": "a plan node outside the class (INTERSECT, EXCEPT, GROUPING SETS, VALUES, ...)",
    "LIMIT": "LIMIT without ORDER BY, OFFSET, or ORDER BY ... LIMIT below another operator",
    "EXPRESSION": "an expression, function, cast or literal outside the evaluated language",
    "TIME_ZONE": "date or time arithmetic in a session time zone other than UTC",
    "NONDETERMINISTIC": "a non-deterministic expression (rand(), uuid(), ...)",
    "AGGREGATE": "an aggregate function or form outside the class (FILTER, DISTINCT of several "
    "columns, ...)",
    "WINDOW": "a window function or window specification outside the class",
    "JOIN": "a join without a column equality of each side, an outer join with another "
    "condition, or a keyed read the join needs that no column provides",
    "NULL_AWARE_ANTI_JOIN": "NOT IN over a column that may be NULL",
    "SUBQUERY": "a scalar subquery that is correlated, not one global aggregate, or outside "
    "WHERE and HAVING",
    "SOURCE": "a relation that is not a snapview table with a primary key",
    "INTERNAL": "an internal error while analyzing the query (logged with its traceback)",
}


class Unsupported(Exception):
    """The query (or a part of it) is outside what is maintained incrementally; ``str(e)`` names
    the construct, ``code`` is its stable reason code (one of ``REASON_CODES``)."""

    def __init__(self, message: str, *, code: str) -> None:
        if code not in REASON_CODES:
            raise ValueError(f"unknown reason code {code!r}")
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Col:
    id: int


@dataclass(frozen=True)
class Lit:
    value: object
    dtype: str


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple
    dtype: str  # Spark's simpleString of the result type


@dataclass(frozen=True)
class GroupRef:
    """Inside an aggregate's result expression: the value of grouping expression ``index``."""

    index: int


@dataclass(frozen=True)
class AggRef:
    """Inside an aggregate's result expression: the final value of aggregate ``index``."""

    index: int


Expr = Col | Lit | Call | GroupRef | AggRef


@dataclass(frozen=True)
class Attr:
    id: int
    name: str
    dtype: str
    nullable: bool


@dataclass(frozen=True)
class CalendarInterval:
    """A value of Spark's legacy INTERVAL type (``make_interval``): months, days and
    microseconds, added to a timestamp in that order."""

    months: int
    days: int
    micros: int


# ---------------------------------------------------------------------- operators


@dataclass(frozen=True)
class Scan:
    table: str
    attrs: tuple[Attr, ...]  # the columns the plan uses, a subset of the table's

    def inputs(self) -> tuple[Node, ...]:
        return ()

    def columns(self) -> tuple[Attr, ...]:
        return self.attrs


@dataclass(frozen=True)
class Filter:
    cond: Expr
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child,)

    def columns(self) -> tuple[Attr, ...]:
        return self.child.columns()


@dataclass(frozen=True)
class Project:
    outputs: tuple[tuple[Attr, Expr], ...]
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child,)

    def columns(self) -> tuple[Attr, ...]:
        return tuple(a for a, _ in self.outputs)


@dataclass(frozen=True)
class Join:
    """Equi-join: ``left_keys[i] = right_keys[i]`` (column ids of each side), then
    ``residual`` (None: nothing more). ``kind`` "inner", "left", "right" or "full": an outer
    join keeps a row of its outer side(s) without a match, padded with NULLs (no residual)."""

    left: Node
    right: Node
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    residual: Expr | None
    kind: str = "inner"

    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def columns(self) -> tuple[Attr, ...]:
        return self.left.columns() + self.right.columns()


@dataclass(frozen=True)
class SemiJoin:
    """A semi join (``anti`` False: EXISTS, IN) or anti join (``anti`` True: NOT EXISTS, and
    NOT IN where neither side can be NULL): the rows of ``left`` for which some row of
    ``right`` has ``left_keys[i] = right_keys[i]`` for every i and makes ``residual`` TRUE
    (None: nothing more), or for which none does. ``residual`` sees a left row's columns then
    a right row's; the result has the left's columns only. A left row with a NULL key never
    matches (so an anti join keeps it). Maintained by re-deciding the rows of the keys a change
    touches (``spark_sink.ivm.ops.semi_join``)."""

    left: Node
    right: Node
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    residual: Expr | None
    anti: bool

    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def columns(self) -> tuple[Attr, ...]:
        return self.left.columns()


@dataclass(frozen=True)
class AggCall:
    kind: str  # count | sum | avg | min | max
    args: tuple[Expr, ...]
    dtype: str  # the aggregate's result type
    input_dtype: str  # the argument's type (sum, avg, min, max)
    distinct: bool = False  # COUNT/SUM/AVG(DISTINCT x): over the distinct non-NULL values


@dataclass(frozen=True)
class Aggregate:
    groups: tuple[Expr, ...]
    group_dtypes: tuple[str, ...]
    aggs: tuple[AggCall, ...]
    outputs: tuple[tuple[Attr, Expr], ...]  # over GroupRef / AggRef
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child,)

    def columns(self) -> tuple[Attr, ...]:
        return tuple(a for a, _ in self.outputs)


@dataclass(frozen=True)
class Union:
    """UNION ALL: the rows of every child, matched by position; ``attrs`` are the result's
    columns (Spark names them by the first child's)."""

    attrs: tuple[Attr, ...]
    children: tuple[Node, ...]

    def inputs(self) -> tuple[Node, ...]:
        return self.children

    def columns(self) -> tuple[Attr, ...]:
        return self.attrs


@dataclass(frozen=True)
class Window:
    """Ranking window functions over one window spec: each of ``funcs`` (its output attribute,
    ``row_number`` | ``rank`` | ``dense_rank``) numbers the rows of each partition (rows equal
    on the columns ``partition``, plain column ids of the child) in the order of ``order``
    (expression, ascending, nulls first), as Spark does. The rows of the child pass through with
    the function values appended. Maintained by recomputing every partition the change touches
    (``spark_sink.ivm.ops.window``)."""

    funcs: tuple[tuple[Attr, str], ...]
    partition: tuple[int, ...]
    order: tuple[tuple[Expr, bool, bool], ...]
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child,)

    def columns(self) -> tuple[Attr, ...]:
        return self.child.columns() + tuple(a for a, _ in self.funcs)


@dataclass(frozen=True)
class ScalarFilter:
    """A filter whose condition reads uncorrelated scalar subqueries (TPC-H q11's threshold,
    q15's maximum, q22's average): ``cond`` over the child's columns and, for each of
    ``subs`` (global aggregates: one row each), its one output column. Maintained by
    filtering the child's change at the subqueries' values while they stay; an epoch in which
    one of them moves is a build (``spark_sink.ivm.ops.scalar_filter``)."""

    cond: Expr
    subs: tuple[Node, ...]
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child, *self.subs)

    def columns(self) -> tuple[Attr, ...]:
        return self.child.columns()


@dataclass(frozen=True)
class TopK:
    """ORDER BY ... LIMIT ``limit``: the first ``limit`` rows of ``child`` in the order of
    ``order`` (expression, ascending, nulls first), rows tied on it ordered by the whole row
    (Spark picks among ties arbitrarily; this pick is deterministic, so a view recomputed
    without a change to its tied rows keeps the same ones). Maintained over an ordered state
    table of the child's rows (``spark_sink.ivm.ops.topk``)."""

    order: tuple[tuple[Expr, bool, bool], ...]
    limit: int
    child: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.child,)

    def columns(self) -> tuple[Attr, ...]:
        return self.child.columns()


Node = Scan | Filter | ScalarFilter | Project | Join | SemiJoin | Aggregate | Union | Window | TopK
_NODE_TYPES = get_args(Node)  # the union's classes, for isinstance


def output(node: Node) -> tuple[Attr, ...]:
    """The attributes ``node`` produces, in order."""
    return node.columns()


def scans(node: Node) -> list[Scan]:
    """The Scan leaves, left to right (the order of the delta rule's terms)."""
    return [n for n in walk(node) if isinstance(n, Scan)]


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, in pre-order (inputs left to right)."""
    yield node
    for c in node.inputs():
        yield from walk(c)


def joins(node: Node) -> list[Join]:
    """The Join nodes of the tree in pre-order (the order of catalyst_joins)."""
    return [n for n in walk(node) if isinstance(n, Join)]


def semi_joins(node: Node) -> list[SemiJoin]:
    """The SemiJoin nodes of the tree in pre-order (the order of catalyst_semi_joins)."""
    return [n for n in walk(node) if isinstance(n, SemiJoin)]


def aggregates(node: Node) -> list[Aggregate]:
    """The Aggregate nodes of the tree in pre-order (the order of catalyst_aggregates)."""
    return [n for n in walk(node) if isinstance(n, Aggregate)]


def top_k_root(root: Node) -> tuple[TopK, list[Project]] | None:
    """The TopK at the top of ``root`` under nothing but Projects (outermost first), else None."""
    projects = []
    while isinstance(root, Project):
        projects.append(root)
        root = root.child
    return (root, projects) if isinstance(root, TopK) else None


def column_ids(expr: object) -> set[int]:
    """The ids of the columns an expression (or a tuple of them) reads."""
    out: set[int] = set()
    stack = [expr]
    while stack:
        x = stack.pop()
        if isinstance(x, Col):
            out.add(x.id)
        elif isinstance(x, Call):
            stack.extend(x.args)
        elif isinstance(x, tuple | list):
            stack.extend(x)
    return out


def prune_scans(root: Node) -> Node:
    """``root`` with every Scan read by a Project, directly or through Filters, cut to the
    columns that Project and those Filters read, in the table's order; the Project's output
    and everything above it are unchanged.

    Why: Spark prunes no column of a Python data source, so a Scan carries every column of
    its table and a keyed read decoded them all (TPC-H's lineitem: 16, four of them Decimals
    and three dates, where q21 reads four); Catalyst puts the Project that drops them right
    above the relation or above its filters, which is the shape cut here."""

    def visit(n: Node) -> Node:
        if isinstance(n, Project):
            chain: list[Filter] = []
            c = n.child
            while isinstance(c, Filter):
                chain.append(c)
                c = c.child
            if isinstance(c, Scan):
                need = column_ids(tuple(e for _, e in n.outputs))
                for f in chain:
                    need |= column_ids(f.cond)
                attrs = tuple(a for a in c.attrs if a.id in need)
                if not attrs or len(attrs) == len(c.attrs):
                    return n
                below: Node = Scan(c.table, attrs)
                for flt in reversed(chain):
                    below = Filter(flt.cond, below)
                return Project(n.outputs, below)
        changes: dict[str, object] = {}
        for field in fields(n):
            v = getattr(n, field.name)
            if isinstance(v, _NODE_TYPES):
                changes[field.name] = visit(v)
            elif isinstance(v, tuple) and v and all(isinstance(x, _NODE_TYPES) for x in v):
                changes[field.name] = tuple(visit(x) for x in v)
        return replace(n, **changes) if changes else n  # type: ignore[arg-type]

    return visit(root)
