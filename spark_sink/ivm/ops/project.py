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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet

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
        out = _acero_project(z.table, list(exprs.values()) + [pc.field(WEIGHT)], [*names, WEIGHT])
        return ArrowZSet(out)
    # Callables see the data columns of the same table the expressions were evaluated over (one
    # Acero pass carries both), so every column lines up row for row whatever Acero's order.
    data_names = z.schema.names
    carried = _acero_project(
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


def _acero_project(table: pa.Table, exprs: list[pc.Expression], names: list[str]) -> pa.Table:
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration("project", acero.ProjectNodeOptions(exprs, names)),
        ]
    )
    return plan.to_table(use_threads=False)
