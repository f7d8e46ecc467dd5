"""A view's change over Arrow: from the columnar delta of its query to the rows to PUT and the
keys to DELETE, with the same result as the row path (``Incremental._view_mutations``).

The delta (an ``ArrowZSet`` over the plan's root columns, which are the view's visible columns
in order) is consolidated; a row of weight +1 is PUT, and a key whose rows only leave is
DELETEd. Rows and keys are told apart as the store tells them apart: NULL equals NULL, and a
DOUBLE by its bits (-0.0 is not 0.0, a NaN is its payload), since the view's stored rows and
keys hold those bits (``row_identity`` is the same rule for the row path). What the row path
reports as an error (a row of weight above 1, two rows for one key: the view's key is not
unique in the query's result) or cannot be compared exactly here (a NULL in a key column)
raises ``NotColumnar``, so the row path takes the epoch and raises its own error naming the
key. Nothing here imports pyspark.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.arrow_expr import NotColumnar
from spark_sink.ivm.ops.keys import any_null
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet

_ROW = "__row"


def row_identity(values: tuple, floats: frozenset[int]) -> tuple:
    """``values`` as the store tells rows (or keys) apart: the positions ``floats`` (DOUBLE
    columns) by their bits, so -0.0 and 0.0 differ and a NaN is its payload, as their stored
    encodings do; every other value as it is."""
    return tuple(
        struct.pack(">d", v) if i in floats and isinstance(v, float) else v
        for i, v in enumerate(values)
    )


def view_change(view: TableInfo, z: ArrowZSet) -> tuple[pa.Table, list[tuple]]:
    """(the rows to PUT over the view's visible columns, the keys to DELETE as tuples of Python
    values) for the change ``z`` of the view's query; ``NotColumnar`` where the row path must
    decide (see the module docstring)."""
    names = [c.name for c in view.table_schema.visible_columns]
    if z.table.num_columns != len(names) + 1:
        raise NotColumnar(f"a delta of {z.table.num_columns - 1} columns for {len(names)}")
    pk = list(view.primary_key)
    table = z.table.rename_columns([*names, WEIGHT])
    net = _consolidated(table, names)  # the distinct rows' identities, weights and row numbers
    if not net.num_rows:
        return table.select(names).slice(0, 0), []
    w = net[WEIGHT]
    if pc.any(pc.greater(w, 1)).as_py() or pc.any(any_null(net, pk)).as_py():
        raise NotColumnar("a row twice, or a NULL key")
    puts = net.filter(pc.greater(w, 0))
    if puts.num_rows:
        per_key = puts.group_by(pk, use_threads=False).aggregate([([], "count_all")])
        if per_key.num_rows != puts.num_rows:
            raise NotColumnar("two rows for one key")
    gone = net.filter(pc.less(w, 0)).select([*pk, _ROW])
    if gone.num_rows and puts.num_rows:
        gone = gone.join(puts.select(pk), pk, join_type="left anti", use_threads=False)
    gone = gone.group_by(pk, use_threads=False).aggregate([(_ROW, "min")])
    old = table.select(pk).take(gone[f"{_ROW}_min"])  # each key as the query gave it
    keys = list(zip(*(old[c].to_pylist() for c in pk), strict=True)) if old.num_rows else []
    return table.select(names).take(puts[_ROW]), keys


def _bits(table: pa.Table, names: list[str]) -> pa.Table:
    """The columns ``names`` with each floating point column replaced by its bits (an integer
    column of the same width and the same NULLs): equal exactly where the stored values are."""
    cols = []
    for n in names:
        col = table[n]
        if pa.types.is_floating(col.type):
            as_int = pa.int64() if col.type.bit_width == 64 else pa.int32()
            col = pa.chunked_array([c.view(as_int) for c in col.chunks], as_int)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=names)


def _consolidated(table: pa.Table, names: list[str]) -> pa.Table:
    """``table``'s distinct rows (by ``_bits``: NULLs equal, floats by their bits) with their
    summed weights, zero sums dropped: the identity columns, ``__weight`` and ``__row``, the
    number of one of the row's copies in ``table`` (its values as the query made them)."""
    if not table.num_rows:
        return (
            _bits(table, names)
            .append_column(WEIGHT, table[WEIGHT])
            .append_column(_ROW, pa.array([], pa.int64()))
        )
    lo, hi = pc.min_max(table[WEIGHT]).values()
    if table.num_rows * max(abs(lo.as_py()), abs(hi.as_py())) >= 2**63:
        raise NotColumnar("weights whose sum could leave BIGINT")
    rows = pa.array(range(table.num_rows), pa.int64())
    keyed = _bits(table, names).append_column(WEIGHT, table[WEIGHT]).append_column(_ROW, rows)
    net = keyed.group_by(names, use_threads=False).aggregate([(WEIGHT, "sum"), (_ROW, "min")])
    net = net.filter(pc.not_equal(net[f"{WEIGHT}_sum"], 0))
    return net.rename_columns([*names, WEIGHT, _ROW])
