"""A view's change over Arrow: from the columnar delta of its query to the rows to PUT and the
keys to DELETE, with the same result as the row path (``Incremental._view_mutations``).

The delta (an ``ArrowZSet`` over the plan's root columns, which are the view's visible columns
in order) is consolidated; a row of weight +1 is PUT, and a key whose rows only leave is
DELETEd. What the row path reports as an error (a row of weight above 1, two rows for one key:
the view's key is not unique in the query's result) or cannot be compared exactly here (a NULL
in a key column) raises ``NotColumnar``, so the row path takes the epoch and raises its own
error naming the key. Nothing here imports pyspark.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.arrow_expr import NotColumnar
from spark_sink.ivm.ops.keys import any_null
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, normalized_keys

_ROW = "__row"


def view_change(view: TableInfo, z: ArrowZSet) -> tuple[pa.Table, list[tuple]]:
    """(the rows to PUT over the view's visible columns, the keys to DELETE as tuples of Python
    values) for the change ``z`` of the view's query; ``NotColumnar`` where the row path must
    decide (see the module docstring)."""
    names = [c.name for c in view.table_schema.visible_columns]
    if z.table.num_columns != len(names) + 1:
        raise NotColumnar(f"a delta of {z.table.num_columns - 1} columns for {len(names)}")
    pk = list(view.primary_key)
    net = _consolidated(z.table.rename_columns([*names, WEIGHT]), names)
    if not net.num_rows:
        return net.drop_columns([WEIGHT]), []
    w = net[WEIGHT]
    if pc.any(pc.greater(w, 1)).as_py() or pc.any(any_null(net, pk)).as_py():
        raise NotColumnar("a row twice, or a NULL key")
    puts = net.filter(pc.greater(w, 0)).drop_columns([WEIGHT])
    if puts.num_rows:
        per_key = puts.group_by(pk, use_threads=False).aggregate([([], "count_all")])
        if per_key.num_rows != puts.num_rows:
            raise NotColumnar("two rows for one key")
    gone = net.filter(pc.less(w, 0)).select(pk)
    if gone.num_rows and puts.num_rows:
        gone = gone.join(puts.select(pk), pk, join_type="left anti", use_threads=False)
    gone = gone.group_by(pk, use_threads=False).aggregate([]).select(pk)
    keys = list(zip(*(gone[c].to_pylist() for c in pk), strict=True)) if gone.num_rows else []
    return puts, keys


def _consolidated(table: pa.Table, names: list[str]) -> pa.Table:
    """``table``'s rows consolidated (``ArrowZSet.consolidate``'s equality: NULLs equal, floats
    normalized), each distinct row given by one of its own copies: a DOUBLE column keeps the
    value the query computed (-0.0 stays -0.0, a NaN its bits), as the row path writes it."""
    if not table.num_rows:
        return table
    lo, hi = pc.min_max(table[WEIGHT]).values()
    if table.num_rows * max(abs(lo.as_py()), abs(hi.as_py())) >= 2**63:
        raise NotColumnar("weights whose sum could leave BIGINT")
    rows = pa.array(range(table.num_rows), pa.int64())
    keyed = normalized_keys(table, names).append_column(_ROW, rows)
    net = keyed.group_by(names, use_threads=False).aggregate([(WEIGHT, "sum"), (_ROW, "min")])
    net = net.filter(pc.not_equal(net[f"{WEIGHT}_sum"], 0))
    return table.select(names).take(net[f"{_ROW}_min"]).append_column(WEIGHT, net[f"{WEIGHT}_sum"])
