"""Delta rules: the change of a query's result between two barriers, from the changes of its
sources and keyed reads of their other rows.

``DeltaRules`` runs one epoch over a plan tree. Each node's rule is its operator's
(``spark_sink.ivm.ops``, one module per node type, found by ``ops.operator.operator_for``);
this module only memoizes each node's delta, counts the keys read, caches compiled expressions,
and walks the tree for the build-time questions (``lookup_accesses``, ``plan_accesses``,
``operator_tree``). The rules the operators keep:

Changes are Z-sets: rows with integer weights (+1 inserted, -1 deleted; an update is both).

- Filter and Project apply to the changed rows and keep their weights.
- Inner equi-join: d(L join R) = dL join R_old + L_new join dR. ``R_old`` and ``L_new`` are never
  read whole: only their rows whose join key occurs in the other side's change are read, by key
  (``lookup``), through every operator below the join (a multi-way join looks up one input at a
  time, each by the keys the previous one found). Superset reads are harmless: the join and the
  filters above it are applied to whatever was read.
- Outer joins (LEFT, RIGHT, FULL): the inner join's delta, plus the change of the dangling rows
  of each outer side: for every join key the change touches (on either side), that side's rows
  that had no match at the old barrier are retracted and those with none at the new barrier
  emitted, padded with NULLs; a row with a NULL key always dangles. Whether a key has a match is
  counted: each outer side keeps a match-count state table (per join key, how many rows of the
  other side carry it; ``spark_sink.ivm.outer``), stepped by the other side's change, and a row
  dangles exactly while its key's count is 0.
- Window (ROW_NUMBER/RANK/DENSE_RANK, the TopK): every partition the change touches read by key
  at both barriers and ranked again, old rows retracted, new ones emitted
  (``spark_sink.ivm.ops.window``).
- Aggregate: the child's delta folded per group into the group state table
  (``spark_sink.ivm.aggregate``); its output change is the group's old row retracted and its new
  row emitted. A lookup into an aggregate reads the group state by key (the new state of a group
  this epoch changed, else the stored one).

A lookup of a table by columns is keyed one of two ways (``Access``): by the table's primary key
when the columns cover it, else through an index state table (join column, primary key) that the
view job keeps in step with the table (``spark_sink.ivm.ops.scan.index_table``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from kvstore.errors import InvalidArgument
from spark_sink.ivm.expressions import Fn, compile_expr
from spark_sink.ivm.ops.operator import Access, Inputs, PkOf, ZSet, operator_for
from spark_sink.ivm.plan import Aggregate, Expr, Node, Scan, walk

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_sink.ivm.ops.zset import ArrowZSet

# ---------------------------------------------------------------------- planning


def lookup_accesses(
    node: Node, ids: tuple[int, ...], pk_of: PkOf, out: list[Access] | None = None
) -> list[Access]:
    """The keyed reads ``DeltaRules.lookup(node, ids, ...)`` will make (checked at build:
    raises Unsupported when ``ids`` cannot be traced to a stored column)."""
    out = [] if out is None else out
    operator_for(node).lookup_accesses(node, ids, pk_of, out)
    return out


def plan_accesses(root: Node, pk_of: PkOf) -> list[Access]:
    """Every keyed read the delta rules of ``root``'s tree can make, node by node in pre-order
    (a join's two sides, a window's partitions)."""
    out: list[Access] = []
    for n in walk(root):
        out += operator_for(n).plan_accesses(n, pk_of)
    return out


# The process's switch for the columnar path of epochs (the view's tree over Arrow, and the
# columnar aggregate): unset or "auto" takes it where the plan allows, "off" never does (the row
# rules take every epoch: for comparing the two, and as a way around a fault in one).
COLUMNAR_ENV = "SNAPVIEW_COLUMNAR"


def columnar_switched_off() -> bool:
    """Whether SNAPVIEW_COLUMNAR is off in this process; a value that is neither auto nor off
    is refused, naming it."""
    value = os.environ.get(COLUMNAR_ENV, "").strip().lower()
    if value in ("", "auto", "on", "1", "true", "yes"):
        return False
    if value in ("off", "0", "false", "no"):
        return True
    raise InvalidArgument(
        f"{COLUMNAR_ENV}={os.environ[COLUMNAR_ENV]!r}: expected auto (the default: the columnar "
        "path where the plan allows it) or off"
    )


def columnar_reason(root: Node) -> str | None:
    """None when every node of ``root``'s tree has a columnar rule (``DeltaRules.delta_arrow``
    then computes its delta over Arrow), else the first node's reason, in pre-order."""
    if columnar_switched_off():
        return f"{COLUMNAR_ENV} is off"
    for n in walk(root):
        why = operator_for(n).columnar_reason(n)
        if why is not None:
            return why
    return None


def operator_tree(root: Node) -> list[str]:
    """``explain()``'s operator tree: one line per node, indented by depth, each the node's
    operator's own account of how it is kept."""
    lines: list[str] = []

    def visit(n: Node, depth: int) -> None:
        lines.append("  " * depth + operator_for(n).explain(n))
        for c in n.inputs():
            visit(c, depth + 1)

    visit(root, 0)
    return lines


# ---------------------------------------------------------------------- running


class MatchCounts(Protocol):
    """An outer side's or a semi join's match counts for one epoch (spark_sink.ivm.outer)."""

    def step(self, keys: set[tuple], change: dict[tuple, int]) -> dict[tuple, tuple[int, int]]: ...


class AggregateState(Protocol):
    """An Aggregate node's group state for one epoch (spark_sink.ivm.aggregate)."""

    why_rows: str | None  # None: its columnar path may take the epoch; else why not

    def delta(self, rules: DeltaRules, node: Aggregate, child: ZSet) -> ZSet: ...

    def delta_of_arrow(
        self,
        rules: DeltaRules,
        node: Aggregate,
        child: Node,
        change: pa.Table,
        weights: pa.Array,
        names: list[str],
    ) -> ZSet:
        """``delta`` for a ``child`` whose change is given as Arrow (its i-th column
        ``change[names[i]]``), free to take it as rows instead."""
        ...

    def delta_of_scan(
        self, rules: DeltaRules, node: Aggregate, child: Node, scan: Scan, names: list[str]
    ) -> ZSet:
        """``delta(rules, node, rules.delta(child))`` for a ``child`` that is ``scan``'s
        columns ``names`` (``ops.aggregate.plain_source``), free to read the change
        otherwise."""
        ...

    def lookup(
        self, rules: DeltaRules, node: Aggregate, idx: list[int], groups: set[tuple], side: str
    ) -> list[tuple]: ...


class TopKState(Protocol):
    """An ORDER BY ... LIMIT's ordered state for one epoch (spark_sink.ivm.topk_state)."""

    def step(self, change: dict[tuple, int]) -> tuple[list, list]: ...


class DeltaRules:
    """Runs the delta rules of one query tree over one epoch's ``Inputs``; counts lookups."""

    def __init__(
        self,
        inputs: Inputs,
        aggregates: Mapping[int, AggregateState] | None = None,
        matches: Mapping[tuple[int, str], MatchCounts] | None = None,
        topks: Mapping[int, TopKState] | None = None,
    ) -> None:
        self.inputs = inputs
        self.aggregates = aggregates or {}  # id(Aggregate node) -> its group state
        # (id(Join node), outer side) or (id(SemiJoin node), "exists") -> its match counts
        self.matches = matches or {}
        self.topks = topks or {}  # id(TopK node) -> its ordered state
        self.lookups = 0  # keys looked up
        self._compiled: dict[object, Fn] = {}
        self._deltas: dict[int, ZSet] = {}
        self._arrow_deltas: dict[int, ArrowZSet] = {}

    def delta(self, node: Node) -> ZSet:
        """The change of ``node``'s result between the old and the new barrier (computed once
        per node and epoch, by the node's operator)."""
        got = self._deltas.get(id(node))
        if got is None:
            got = self._deltas[id(node)] = operator_for(node).delta(self, node)
        return got

    def given(self, node: Node, change: ZSet) -> None:
        """Take ``change`` as ``node``'s delta this epoch (computed elsewhere: by another
        task's rules, ``spark_sink.ivm.executor_delta``); the nodes above it build on it."""
        self._deltas[id(node)] = change

    def lookup(self, node: Node, ids: tuple[int, ...], values: set[tuple], side: str) -> ZSet:
        """The rows of ``node``'s result at ``side`` whose ``ids`` equal one of ``values`` (a
        superset: callers re-apply the join), each with weight 1."""
        if not values:
            return ZSet(tuple(a.id for a in node.columns()))
        return operator_for(node).lookup(self, node, ids, values, side)

    def delta_arrow(self, node: Node) -> ArrowZSet:
        """``delta(node)`` over Arrow (once per node and epoch), for a tree whose
        ``columnar_reason`` is None; ``ops.arrow_expr.NotColumnar`` when this epoch's data is
        not taken that way."""
        got = self._arrow_deltas.get(id(node))
        if got is None:
            got = self._arrow_deltas[id(node)] = operator_for(node).delta_arrow(self, node)
        return got

    def lookup_arrow(
        self, node: Node, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        """``lookup`` over Arrow; empty ``values`` give an empty Z-set of the node's schema."""
        return operator_for(node).lookup_arrow(self, node, ids, values, side)

    def compiled(self, key: object, expr: Expr, pos: dict[int, int]) -> Fn:
        """``compile_expr(expr, pos)``, compiled once per ``key`` and epoch."""
        f = self._compiled.get(key)
        if f is None:
            f = self._compiled[key] = compile_expr(expr, pos)
        return f
