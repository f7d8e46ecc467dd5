"""An index state table's change for one epoch, from its source's change, as whole columns.

An index state table ``V__sv_ix_T_C`` (``spark_sink.ivm.ops.scan.index_table``) holds one row (k,
p_<pk>...) per row of source T whose column C is not NULL: C's value and the row's primary key.
An epoch keeps it in step with T: every (k, pk) of a new image is put, every (k, pk) of an old
image that no new image has is deleted. A row whose C did not change puts its entry again
(the same row: the view job writes it unchanged), and a NULL C has no entry.

``index_change`` computes the two sets from the change decoded into Arrow
(``StoreInputs.changes_arrow``) with Arrow's kernels: a filter, a distinct (``group_by``) and an
anti-join, no Python object per changed row. Floating point index columns take the row path
(``index_change_rows``): Arrow's grouping and joins tell -0.0 from 0.0 where Python's equality,
which the row path keeps, does not.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def index_columns(primary_key: tuple[str, ...]) -> list[str]:
    """The index table's visible columns: ``k`` then ``p_<pk>`` for each key column."""
    return ["k", *(f"p_{p}" for p in primary_key)]


def index_change(
    data: pa.Table, weights: pa.Array, column: str, primary_key: tuple[str, ...]
) -> tuple[pa.Table, pa.Table]:
    """(entries to put, entries to delete) for a change of the source (``data``: its old images
    with weight -1 and new images with +1, over its visible columns), each a table over
    ``index_columns`` with the source's types, without repeats. An entry both put and deleted
    (the row kept its value) is only put."""
    names = index_columns(primary_key)
    keyed = pa.table(
        [data[column], *(data[p] for p in primary_key), weights], names=[*names, "__w"]
    )
    keyed = keyed.filter(pc.is_valid(keyed["k"]))
    put = _distinct(keyed.filter(pc.greater(keyed["__w"], 0)).drop_columns(["__w"]), names)
    gone = _distinct(keyed.filter(pc.less(keyed["__w"], 0)).drop_columns(["__w"]), names)
    return put, _without(gone, put, names)


def _without(gone: pa.Table, put: pa.Table, names: list[str]) -> pa.Table:
    """The entries of ``gone`` that ``put`` does not have (an anti-join)."""
    if put.num_rows and gone.num_rows:
        gone = gone.join(put, keys=names, join_type="left anti", use_threads=False)
    return gone.select(names)


def _distinct(t: pa.Table, names: list[str]) -> pa.Table:
    if t.num_rows < 2:
        return t
    return t.group_by(names, use_threads=False).aggregate([]).select(names)


def index_change_rows(
    rows: list[tuple],
    weights: list[int],
    columns: tuple[str, ...],
    column: str,
    primary_key: tuple[str, ...],
) -> tuple[list[list], list[list]]:
    """``index_change`` over rows as tuples (``columns`` names their positions), with Python's
    equality: (entries to put, entries to delete) as lists of values in ``index_columns``
    order."""
    ci = columns.index(column)
    pi = [columns.index(p) for p in primary_key]
    put: dict[tuple, list] = {}
    gone: dict[tuple, list] = {}
    for r, w in zip(rows, weights, strict=True):
        if r[ci] is None:
            continue
        k = (r[ci], *(r[i] for i in pi))
        (put if w > 0 else gone)[k] = list(k)
    return list(put.values()), [v for k, v in gone.items() if k not in put]
