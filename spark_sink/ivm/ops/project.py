"""Project (SELECT list): compute the output columns of each row, weights kept.

Delta rule: projection is linear, d(project(R)) = project(dR). No state. The result is not
consolidated: two input rows that project to the same output row stay two physical rows until
the caller consolidates (their weights then add, as a Z-set projection must).

SQL semantics kept: each column is the caller's pyarrow compute Expression (or a callable over
the data table). NULL propagation is the kernel's (Arrow's arithmetic and comparison kernels
return NULL for a NULL input, as Spark's). Overflow: Spark ANSI raises on BIGINT overflow; use
the ``*_checked`` kernels (``add_checked``, ``multiply_checked``, ...), which raise
``pyarrow.ArrowInvalid``; the unchecked ones wrap and must not be used for Spark's integral
arithmetic. Where no Arrow kernel matches Spark (DECIMAL precision rules, casts of strings,
dates and intervals), the converter supplies a callable.

The module's operator (``ProjectOp``, at its end) has two forms of its rule: over Arrow
(``delta_arrow``/``lookup_arrow``, with the kernels above; each column a copy or an ``ops.arrow_expr`` translation), which an epoch takes when
every node of the view's tree has one (``delta.columnar_reason``), and row-at-a-time over tuples
(``ops.operator.ZSet``), which takes every other tree and any epoch the Arrow form hands back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from spark_sink.ivm.delta import lookup_accesses
from spark_sink.ivm.ops.arrow_expr import NotColumnar, arrow_expr, col_name
from spark_sink.ivm.ops.operator import (
    Access,
    Operator,
    PkOf,
    Sets,
    ZSet,
    columns_of,
    register,
    sees,
)
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet
from spark_sink.ivm.plan import Col, Expr, Project, Unsupported
from spark_sink.ivm.unique_keys import unique_sets

if TYPE_CHECKING:
    from spark_sink.ivm.delta import DeltaRules

# a pyarrow compute Expression, or a callable over the data table
Column: TypeAlias = "pc.Expression | Callable[[pa.Table], pa.Array | pa.ChunkedArray]"


@dataclass(frozen=True)
class ProjectSpec:
    """The output columns in order: ``(name, expression or callable)``. Names are distinct and
    are not ``__weight``."""

    columns: tuple[tuple[str, Column], ...]


def apply_project(spec: ProjectSpec, z: ArrowZSet) -> ArrowZSet:
    """``z``'s rows projected onto ``spec.columns``, each keeping its weight; not consolidated."""
    names = [n for n, _ in spec.columns]
    if WEIGHT in names or len(set(names)) != len(names):
        raise ValueError(f"projected column names must be distinct and not {WEIGHT}: {names}")
    exprs = {
        f"__proj{i}": c for i, (_, c) in enumerate(spec.columns) if isinstance(c, pc.Expression)
    }
    if len(exprs) == len(names):
        out = acero_project(z.table, list(exprs.values()) + [pc.field(WEIGHT)], [*names, WEIGHT])
        return ArrowZSet(out)
    # Callables see the data columns of the same table the expressions were evaluated over (one
    # Acero pass carries both), so every column lines up row for row whatever Acero's order.
    data_names = z.schema.names
    carried = acero_project(
        z.table,
        [*exprs.values(), *(pc.field(n) for n in data_names), pc.field(WEIGHT)],
        [*exprs, *data_names, WEIGHT],
    )
    data = carried.select(data_names)
    cols = [
        carried[f"__proj{i}"] if isinstance(c, pc.Expression) else c(data)
        for i, (_, c) in enumerate(spec.columns)
    ]
    return ArrowZSet(pa.Table.from_arrays([*cols, carried[WEIGHT]], names=[*names, WEIGHT]))


def acero_project(table: pa.Table, exprs: list[pc.Expression], names: list[str]) -> pa.Table:
    """``exprs`` evaluated over every row of ``table`` in one Acero project, as columns
    ``names``, rows in ``table``'s order (one thread)."""
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions(exprs, names)),
        ]
    )
    return plan.to_table(use_threads=False)


# ---------------------------------------------------------------------- the row rule


def project_rows(rules: DeltaRules, node: Project, z: ZSet) -> ZSet:
    """``node``'s columns computed for each row of ``z`` (Spark's evaluator), weights kept."""
    pos = z.pos()
    ids = tuple(a.id for a, _ in node.outputs)
    if all(isinstance(e, Col) for _, e in node.outputs):  # column copies: picked, not evaluated
        idx = [pos[e.id] for _, e in node.outputs]  # type: ignore[union-attr]
        return ZSet(ids, columns_of(z.rows, idx, len(z.ids)), list(z.weights))
    fs = [rules.compiled((id(node), i), e, pos) for i, (_, e) in enumerate(node.outputs)]
    rows = [tuple(f(r) for f in fs) for r in z.rows]
    return ZSet(ids, rows, list(z.weights))


def through_project(node: Project, ids: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]]:
    """The child columns that ``ids`` are plain copies of, and which positions of ``ids``;
    Unsupported when none is (a lookup cannot be keyed by a computed column)."""
    src = {a.id: e for a, e in node.outputs}
    child_ids, kept = [], []
    for i, c in enumerate(ids):
        e = src[c]
        if isinstance(e, Col):
            child_ids.append(e.id)
            kept.append(i)
    if not child_ids:
        raise Unsupported(
            "a join on a computed column (" + ", ".join(f"#{c}" for c in ids) + ") is not "
            "maintained incrementally",
            code="JOIN",
        )
    return tuple(child_ids), kept


@register
class ProjectOp(Operator[Project]):
    """d(project(R)) = project(dR). A lookup by output columns reads the child by the columns
    they copy (a superset when some are computed: the join above re-checks them)."""

    node_type = Project

    def delta(self, rules: DeltaRules, node: Project) -> ZSet:
        return project_rows(rules, node, rules.delta(node.child))

    def lookup(
        self, rules: DeltaRules, node: Project, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        child_ids, kept = through_project(node, ids)
        vals = {tuple(v[i] for i in kept) for v in values}
        return project_rows(rules, node, rules.lookup(node.child, child_ids, vals, side))

    def lookup_accesses(
        self, node: Project, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        child_ids, _ = through_project(node, ids)
        lookup_accesses(node.child, child_ids, pk_of, out)

    def unique_sets(self, node: Project, pk_of: PkOf) -> Sets:
        copied: dict[int, int] = {}  # child id -> an output id holding it unchanged
        for a, e in node.outputs:
            if isinstance(e, Col):
                copied.setdefault(e.id, a.id)
        return [
            frozenset(copied[i] for i in s)
            for s in unique_sets(node.child, pk_of)
            if all(i in copied for i in s)
        ]

    def expressions(self, node: Project) -> list[tuple[Expr, dict[int, int], dict | None]]:
        pos = sees(node.child.columns())
        return [(e, pos, None) for _, e in node.outputs]

    def columnar_reason(self, node: Project) -> str | None:
        try:
            _project_spec(node)
        except NotColumnar as e:
            return f"a projection of {e}"
        return None

    def delta_arrow(self, rules: DeltaRules, node: Project) -> ArrowZSet:
        return _project_arrow(node, rules.delta_arrow(node.child))

    def lookup_arrow(
        self, rules: DeltaRules, node: Project, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        child_ids, kept = through_project(node, ids)
        vals = {tuple(v[i] for i in kept) for v in values}
        return _project_arrow(node, rules.lookup_arrow(node.child, child_ids, vals, side))

    def explain(self, node: Project) -> str:
        return "Project: the changed rows' columns computed"


def _project_spec(node: Project) -> ProjectSpec:
    """The projection over Arrow: a column copied is picked whatever its type; a computed one
    is translated (``NotColumnar`` when it cannot be)."""
    attrs = {a.id: a for a in node.child.columns()}
    return ProjectSpec(
        tuple(
            (
                col_name(a.id),
                pc.field(col_name(e.id)) if isinstance(e, Col) else arrow_expr(e, attrs),
            )
            for a, e in node.outputs
        )
    )


def _project_arrow(node: Project, z: ArrowZSet) -> ArrowZSet:
    if all(isinstance(e, Col) for _, e in node.outputs):  # column copies: picked, not evaluated
        cols = [z.table[col_name(e.id)] for _, e in node.outputs]  # type: ignore[union-attr]
        names = [col_name(a.id) for a, _ in node.outputs]
        return ArrowZSet(pa.Table.from_arrays([*cols, z.weights], names=[*names, WEIGHT]))
    return apply_project(_project_spec(node), z)
