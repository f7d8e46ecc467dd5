"""Columnar Z-sets: a change set as one Arrow table of rows plus an int64 weight column.

A Z-set maps rows to integer weights (+1 an inserted row, -1 a deleted one; an update is both).
``ArrowZSet`` keeps the rows of many changes in one ``pyarrow.Table`` whose last column,
``__weight`` (int64, never NULL), is each row's weight. The same row may appear several times and
a weight may be 0 or negative: the Z-set is the sum over its physical rows, and ``consolidate()``
gives its canonical form (one physical row per distinct row, weight summed, zeros dropped).

Row equality is Spark's grouping equality, which ``consolidate``, the join and the aggregate
share (``normalized_keys``):

- NULL equals NULL (GROUP BY puts every NULL in one group; Z-set rows with NULLs cancel).
- Floating point values are normalized first, as Spark's ``NormalizeFloatingNumbers`` does for
  grouping and join keys: every NaN is one value (NaN == NaN, whatever its bit pattern) and
  -0.0 equals 0.0. ``consolidate`` therefore returns 0.0 where its input held -0.0 and the
  canonical NaN for every NaN. Floats nested inside struct or list columns are not normalized.

Weights never wrap: a sum or product of weights that leaves int64 raises ``WeightOverflow``.
Nothing here imports pyspark; see ``spark_sink.ivm.ops``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

WEIGHT = "__weight"
# The one NaN object ``to_counter`` puts in rows: Python compares tuples element by element with
# an identity shortcut and hashes a NaN by its identity, so equal rows holding NaN must share it.
NAN = float("nan")
_INT64_MAX = 2**63 - 1


class WeightOverflow(ArithmeticError):
    """A weight (or a per-group sum an operator computes exactly) does not fit in int64; the
    message names the column. Nothing is returned wrapped."""


def is_float(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t))


def normalize_floats(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``col`` with every NaN replaced by one canonical NaN and -0.0 by 0.0 (NULL stays NULL);
    other types are returned as they are."""
    if not is_float(col.type):
        return col
    nan = pa.scalar(float("nan"), col.type)
    # -0.0 + 0.0 is +0.0 under IEEE round-to-nearest; NaN + 0.0 keeps the payload, hence if_else
    return pc.if_else(pc.is_nan(col), nan, pc.add(col, pa.scalar(0.0, col.type)))


def _max_abs(col: pa.ChunkedArray | pa.Array) -> int:
    lo, hi = pc.min_max(col).values()
    return max(abs(int(lo.as_py() or 0)), abs(int(hi.as_py() or 0)))


_DECIMAL38_MAX = 10**38 - 1


def exact_group_sum(
    table: pa.Table, keys: list[str], columns: list[str], keep_wide: frozenset[str] = frozenset()
) -> pa.Table:
    """Per group of ``keys`` (NULLs equal), the exact sum of each column of ``columns`` (int64,
    or DECIMAL(38,0) holding integers), returned as int64 (a column of ``keep_wide``: as DECIMAL(38,0)
    where it was summed so). A column is summed as int64 when
    n * max|value| < 2**63 proves no sum can wrap, else as DECIMAL(38,0) when
    n * max|value| < 10**38 proves the same there; a column neither proves, or a group's sum
    that does not fit int64 (outside ``keep_wide``), raises ``WeightOverflow`` naming the column:
    nothing wraps. Output columns are ``keys`` then ``columns`` under their own names; no keys
    gives one row."""
    wide = table
    n = table.num_rows
    for c in columns:
        bound = n * _max_abs(table[c]) if n else 0
        is_int64 = table[c].type == pa.int64()
        if is_int64 and bound <= _INT64_MAX:
            continue
        if bound > _DECIMAL38_MAX:
            raise WeightOverflow(f"the sum of {c} over {n} rows may leave DECIMAL(38,0)")
        i = wide.schema.get_field_index(c)
        wide = wide.set_column(i, c, pc.cast(wide[c], pa.decimal128(38, 0)))
    out = wide.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in columns])
    for c in columns:
        s = out[f"{c}_sum"]
        if s.type != pa.int64() and c not in keep_wide:
            try:
                s = pc.cast(s, pa.int64())
            except pa.ArrowInvalid as e:
                raise WeightOverflow(f"a per-group sum of {c} leaves BIGINT: {e}") from None
        # the sum of zero rows (a keyless sum of an empty table) is NULL in Arrow, 0 here
        s = pc.fill_null(s, pa.scalar(0, pa.int64()).cast(s.type))
        out = out.set_column(out.schema.get_field_index(f"{c}_sum"), c, s)
    return out.select([*keys, *columns])


@dataclass(frozen=True)
class ArrowZSet:
    """Rows over ``schema`` with an int64 weight each, held as ``table`` (the data columns, then
    ``__weight``). Equal rows may repeat and weights may be 0 until ``consolidate()``. Immutable:
    every operation returns a new ArrowZSet and shares the Arrow buffers it can."""

    table: pa.Table

    def __post_init__(self) -> None:
        names = self.table.schema.names
        if not names or names[-1] != WEIGHT or self.table.schema.field(WEIGHT).type != pa.int64():
            raise ValueError(f"an ArrowZSet's last column is {WEIGHT} int64, got {names}")
        if names.count(WEIGHT) != 1 or len(set(names)) != len(names):
            raise ValueError(f"an ArrowZSet's columns have distinct names, got {names}")
        if self.table[WEIGHT].null_count:
            raise ValueError(f"{WEIGHT} holds NULL")

    # ------------------------------------------------------------------ construction

    @staticmethod
    def empty(schema: pa.Schema) -> ArrowZSet:
        """The zero Z-set over ``schema`` (the data columns, without ``__weight``)."""
        return ArrowZSet(_with_weight(schema).empty_table())

    @staticmethod
    def from_table(data: pa.Table, weights: pa.Array | Sequence[int] | None = None) -> ArrowZSet:
        """The rows of ``data`` with ``weights`` (each +1 when None)."""
        if weights is None:
            w = pa.array([1] * data.num_rows, pa.int64())
        else:
            w = pa.array(weights, pa.int64()) if not isinstance(weights, pa.Array) else weights
        if len(w) != data.num_rows:
            raise ValueError(f"{data.num_rows} rows but {len(w)} weights")
        return ArrowZSet(data.append_column(WEIGHT, w))

    @staticmethod
    def from_rows(
        schema: pa.Schema, rows: Iterable[Sequence[Any]], weights: Iterable[int]
    ) -> ArrowZSet:
        """Rows given as tuples in ``schema``'s column order, with their weights (for tests and
        small inputs; real changes arrive as Arrow)."""
        rows, weights = list(rows), list(weights)
        if len(rows) != len(weights):
            raise ValueError(f"{len(rows)} rows but {len(weights)} weights")
        cols = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
        data = pa.Table.from_arrays(cols, schema=schema)
        return ArrowZSet.from_table(data, weights)

    # ------------------------------------------------------------------ views

    @property
    def schema(self) -> pa.Schema:
        """The data columns' schema (without ``__weight``)."""
        return self.table.schema.remove(self.table.schema.get_field_index(WEIGHT))

    @property
    def data(self) -> pa.Table:
        """The data columns (without ``__weight``)."""
        return self.table.drop_columns([WEIGHT])

    @property
    def weights(self) -> pa.ChunkedArray:
        return self.table[WEIGHT]

    def __len__(self) -> int:
        """Physical rows (before consolidation), not distinct rows."""
        return self.table.num_rows

    # ------------------------------------------------------------------ algebra

    def negate(self) -> ArrowZSet:
        """Every weight negated (``WeightOverflow`` on a weight of -2**63)."""
        try:
            w = pc.negate_checked(self.weights)
        except pa.ArrowInvalid as e:
            raise WeightOverflow(f"negating {WEIGHT}: {e}") from None
        return ArrowZSet(self.table.set_column(self.table.num_columns - 1, WEIGHT, w))

    def __neg__(self) -> ArrowZSet:
        return self.negate()

    def __add__(self, other: ArrowZSet) -> ArrowZSet:
        return concat([self, other])

    def __sub__(self, other: ArrowZSet) -> ArrowZSet:
        return concat([self, other.negate()])

    def consolidate(self) -> ArrowZSet:
        """The canonical form: one physical row per distinct row (NULLs equal, floats normalized
        as the module says), its weight the sum of its copies' weights, rows whose sum is 0
        dropped. Vectorized: one hash group-by over all data columns. Row order is unspecified.
        ``WeightOverflow`` when a row's summed weight leaves int64."""
        names = [n for n in self.table.schema.names if n != WEIGHT]
        t = normalized_keys(self.table, names)
        out = exact_group_sum(t, names, [WEIGHT])
        return ArrowZSet(out.filter(pc.not_equal(out[WEIGHT], 0)))

    def to_counter(self) -> dict[tuple, int]:
        """The consolidated Z-set as ``{row tuple: weight}`` (Python values; NaN as one shared
        float object so equal rows compare and hash equal). For tests and debugging."""
        out: dict[tuple, int] = {}
        cz = self.consolidate()
        for row in cz.table.to_pylist():
            w = row.pop(WEIGHT)
            key = tuple(NAN if isinstance(v, float) and v != v else v for v in row.values())
            out[key] = out.get(key, 0) + w
        return out


def _with_weight(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field(WEIGHT, pa.int64()))


def normalized_keys(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """``table`` with the floating point columns among ``names`` normalized (``normalize_floats``);
    the same table when none is floating point."""
    for n in names:
        i = table.schema.get_field_index(n)
        if is_float(table.schema.field(i).type):
            table = table.set_column(i, table.schema.field(i), normalize_floats(table[n]))
    return table


def concat(zsets: Sequence[ArrowZSet]) -> ArrowZSet:
    """The sum of ``zsets`` (their physical rows one after another, nothing consolidated). Their
    schemas must be equal, names and types (``ValueError`` saying how they differ)."""
    if not zsets:
        raise ValueError("concat of no Z-sets: use ArrowZSet.empty(schema)")
    first = zsets[0].table.schema
    if all(z.table.schema.equals(first) for z in zsets[1:]):
        return ArrowZSet(pa.concat_tables([z.table for z in zsets]))
    # Equal but for which columns are declared NOT NULL (a decoded table says so, a join's
    # output does not): concatenated under the schema with every column nullable
    loose = _nullable(first)
    for z in zsets[1:]:
        if not _nullable(z.table.schema).equals(loose):
            raise ValueError(f"Z-sets over different schemas: {first} vs {z.table.schema}")
    return ArrowZSet(pa.concat_tables([z.table.cast(loose) for z in zsets]))


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
