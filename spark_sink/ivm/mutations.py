"""A delta epoch's changes as store mutations: the view's change (a Z-set over its visible
columns) and the state tables' new and emptied rows, encoded for a prewrite.

Used where a delta is computed: on the driver (``spark_sink.ivm.strategy``) and in the
executors' tasks (``spark_sink.ivm.executor_delta``), which must write the same mutations for the
same change. Nothing here imports pyspark.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kvstore.errors import SchemaMismatch
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.table_info import TableInfo
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.ivm.index_state import index_change, index_change_rows
from spark_sink.ivm.inputs import StoreInputs, encode_keys
from spark_sink.ivm.ops.operator import ZSet, consolidate
from spark_sink.ivm.ops.zset import ArrowZSet
from spark_sink.ivm.view_change import row_identity, view_change


def encode_table(info: TableInfo, table: pa.Table, mode: str) -> list[Mutation]:
    """Mutations of ``mode`` for the rows of ``table`` (the table's visible columns by name,
    cast to its types), encoded in bulk."""
    if not table.num_rows:
        return []
    schema = info.table_schema.arrow_schema()
    table = table.select(schema.names).cast(schema).combine_chunks()
    enc = ArrowEncoder(info)
    return [m for b in table.to_batches() for m in enc.mutations(b, mode, 0, 0, 0)]


def encode_rows(info: TableInfo, rows: list[list], mode: str) -> list[Mutation]:
    """Mutations of ``mode`` for ``rows`` (each the table's visible columns in order)."""
    if not rows:
        return []
    schema = info.table_schema.arrow_schema()
    names = schema.names
    cols = list(zip(*rows, strict=True))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(list(c), type=schema.field(n).type) for n, c in zip(names, cols, strict=True)],
        schema=schema,
    )
    return ArrowEncoder(info).mutations(batch, mode, 0, 0, 0)


def state_mutations(info: TableInfo, upserts: list[list], deletes: list[list]) -> list[Mutation]:
    """A state table's change: its new rows put, its emptied rows deleted."""
    return encode_rows(info, upserts, "upsert") + encode_rows(info, deletes, "delete")


def view_mutations(view: TableInfo, z: ZSet, one_row: bool) -> list[Mutation]:
    """PUT every row the change adds, DELETE every key it only removes. Rows and keys are
    told apart as the store tells them apart (``view_change.row_identity``: a DOUBLE by its
    bits), not by Python's equality, where -0.0 == 0.0. A key that two rows claim (or a row of
    weight above 1) raises SchemaMismatch naming the view and the key; a one-row view whose
    change leaves more than one row raises it too."""
    cols = view.table_schema.visible_columns
    floats = frozenset(i for i, c in enumerate(cols) if c.type.kind == "DOUBLE")
    if floats:
        acc: dict[tuple, list] = {}
        for r, w in zip(z.rows, z.weights, strict=True):
            got = acc.setdefault(row_identity(r, floats), [r, 0])
            got[1] += w
        net = {ident: (r, w) for ident, (r, w) in acc.items() if w}
    else:
        net = {r: (r, w) for r, w in consolidate(z.rows, z.weights).items()}
    if one_row:
        puts = [r for r, w in net.values() if w > 0]
        if len(puts) > 1:
            raise SchemaMismatch(f"view {view.name!r}: a one-row view got {len(puts)} rows")
        return encode_rows(view, [list(r) for r in puts], "append")
    names = [c.name for c in cols]
    kpos = [names.index(k) for k in view.primary_key]
    kfloats = frozenset(j for j, i in enumerate(kpos) if i in floats)
    put: dict[tuple, tuple] = {}
    gone: dict[tuple, tuple] = {}
    for r, w in net.values():
        key = tuple(r[i] for i in kpos)
        kid = row_identity(key, kfloats) if kfloats else key
        if w > 1 or (w > 0 and kid in put):
            raise not_unique(view, key)
        if w > 0:
            put[kid] = r
        else:
            gone[kid] = key
    deletes = [list(k) for kid, k in gone.items() if kid not in put]
    out = encode_rows(view, [list(r) for r in put.values()], "upsert")
    if deletes:
        out += [(LockOp.DELETE, k, b"") for k in encode_keys(view, deletes)]
    return out


def view_mutations_arrow(view: TableInfo, z: ArrowZSet) -> list[Mutation]:
    """``view_mutations`` of a columnar delta (spark_sink.ivm.view_change), encoded in bulk;
    NotColumnar where the row path must decide."""
    puts, gone = view_change(view, z)
    out = encode_table(view, puts, "upsert")
    if gone:
        out += [(LockOp.DELETE, k, b"") for k in encode_keys(view, gone)]
    return out


def index_mutations(inputs: StoreInputs, ix: TableInfo, source: str, column: str) -> list[Mutation]:
    """The change of ``source``'s index state table ``ix`` on ``column``
    (spark_sink.ivm.index_state) for the epoch's change of ``source`` in ``inputs``: computed
    over the change as Arrow, or row by row for a floating point column. Each changed key's
    entries depend on its two images only, so a slice of the change holding whole records gives
    that slice's share of the mutations."""
    pk = inputs.primary_key(source)
    dtype = ix.table_schema.arrow_schema().field("k").type
    if not pa.types.is_floating(dtype):
        data, weights = inputs.changes_arrow(source)
        if not data.num_rows:
            return []
        try:
            put, gone = index_change(data, weights, column, pk)
        except pa.ArrowNotImplementedError:  # a key type Arrow's kernels do not group
            pass
        else:
            return encode_table(ix, put, "upsert") + encode_table(ix, gone, "delete")
    rows, weights = inputs.changes(source)
    put_rows, gone_rows = index_change_rows(rows, weights, inputs.columns(source), column, pk)
    return state_mutations(ix, put_rows, gone_rows)


def not_unique(view: TableInfo, key: tuple) -> SchemaMismatch:
    """The error of a view whose primary key two rows of the query's result share."""
    return SchemaMismatch(
        f"view {view.name!r}: primary key ({', '.join(view.primary_key)}) is not "
        f"unique in the query result: {key} appears more than once; set "
        "primary_key to columns that identify a row"
    )


def keys_new_to_view(view: TableInfo, z: ZSet | ArrowZSet) -> set[tuple]:
    """The view's keys that the change ``z`` gives a row without taking one away: if the view
    holds any of them already, a second row of the query's result has that key (the change of
    an existing row always takes its old image away). Read from the change alone, so the cost
    follows it; keys are compared by Python's equality (a DOUBLE key's -0.0 and 0.0 are one)."""
    names = [c.name for c in view.table_schema.visible_columns]
    kpos = [names.index(k) for k in view.primary_key]
    if isinstance(z, ArrowZSet):
        t = z.table
        w = t.column(t.num_columns - 1)
        cols = [t.column(i) for i in kpos]

        def keys(mask: pa.ChunkedArray) -> set[tuple]:
            picked = [c.filter(mask).to_pylist() for c in cols]
            return set(zip(*picked, strict=True))

        return keys(pc.greater(w, 0)) - keys(pc.less(w, 0))
    gained: set[tuple] = set()
    lost: set[tuple] = set()
    for r, w in zip(z.rows, z.weights, strict=True):
        if w:
            (gained if w > 0 else lost).add(tuple(r[i] for i in kpos))
    return gained - lost


def refuse_a_second_row(view: TableInfo, z: ZSet | ArrowZSet, inputs: StoreInputs, ts: int) -> None:
    """Raise ``not_unique`` if the change ``z`` gives a key a row while the view as of ``ts``
    already holds one (``keys_new_to_view``): keyed reads of the view, as many as the change's
    new keys. For a view whose key the plan does not prove unique; the driver's delta and each
    write task of the executors' call it alike."""
    new_keys = keys_new_to_view(view, z)
    if new_keys:
        held = inputs.read_by_key(view, new_keys, ts, view.primary_key)
        if held:
            raise not_unique(view, held[0])
