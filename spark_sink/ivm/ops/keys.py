"""Keys a change touches, a Z-set restricted to them, and a change's net weight per key: the
step that lets an operator's cost follow the change instead of its inputs.

A stateful delta rule (outer join, MIN/MAX, DISTINCT) needs the rows of its state or its other
input only for the keys its change touches. The rules in this package take those rows as
ArrowZSets, and are checked against whole inputs; the wiring will read just the touched keys'
rows (keyed lookups) and hand those in. ``restrict_to_keys`` is that read done in memory: each
rule narrows what it is given before reading it, so the property tests, which pass whole inputs,
check the rule on exactly the rows the wiring's reads will give it.

Two key equalities, as the operators need them: grouping equality (``nulls_equal=True``: NULL
equals NULL, as GROUP BY and DISTINCT) and join equality (``nulls_equal=False``: a key with a
NULL in any column matches nothing, as SQL's ``=``). Both normalize floats as Spark does (every
NaN one value, -0.0 equal to 0.0; ``zset.normalize_floats``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet, normalize_floats, normalized_keys


def any_null(table: pa.Table, columns: Sequence[str]) -> pa.ChunkedArray | pa.Array:
    """Per row, whether one of ``columns`` is NULL (all false when ``columns`` is empty)."""
    mask: pa.ChunkedArray | pa.Array = pa.array([False] * table.num_rows, pa.bool_())
    for c in columns:
        mask = pc.or_(mask, pc.is_null(table[c]))
    return mask


def distinct_keys(table: pa.Table, columns: Sequence[str], *, nulls_equal: bool) -> pa.Table:
    """The distinct values of ``columns`` in ``table`` (normalized floats), one row each; with
    ``nulls_equal=False`` tuples holding a NULL are left out (they match no join key)."""
    cols = list(columns)
    t = normalized_keys(table.select(cols), cols)
    if not nulls_equal:
        t = t.filter(pc.invert(any_null(t, cols)))
    if not cols:
        return t.slice(0, min(1, t.num_rows))
    return t.group_by(cols, use_threads=False).aggregate([]).select(cols)


def restrict_to_keys(
    z: ArrowZSet, key_columns: Sequence[str], keys: pa.Table, *, nulls_equal: bool
) -> ArrowZSet:
    """The rows of ``z`` whose ``key_columns`` equal a row of ``keys`` (its columns taken by
    position, types equal to ``key_columns``'), weights kept; not consolidated. Floats compare
    normalized; NULLs compare as ``nulls_equal`` says. A semi-join: each row of ``z`` at most
    once, whatever ``keys`` repeats."""
    cols = list(key_columns)
    if len(cols) != keys.num_columns:
        raise ValueError(f"{keys.num_columns} key columns given for {cols}")
    if not cols:
        return z if keys.num_rows else ArrowZSet(z.table.slice(0, 0))
    zcodes, kcodes = [], []
    for c, k in zip(cols, keys.columns, strict=True):
        if z.table[c].type != k.type:
            raise ValueError(f"key column {c} is {z.table[c].type} but its keys are {k.type}")
        # one dictionary over both sides gives each distinct value (NULL included, as one
        # entry) one integer code, so the semi-join below compares codes, never NULLs
        both = pa.chunked_array(
            [*normalize_floats(z.table[c]).chunks, *normalize_floats(k).chunks], k.type
        ).combine_chunks()
        codes = pc.dictionary_encode(both, null_encoding="encode").indices
        zcodes.append(codes.slice(0, z.table.num_rows))
        kcodes.append(codes.slice(z.table.num_rows))
    names = [f"__key{i}" for i in range(len(cols))]
    row = pa.array(range(z.table.num_rows), pa.int64())
    zt = pa.Table.from_arrays([row, *zcodes], names=["__row", *names])
    kt = pa.Table.from_arrays(kcodes, names=names)
    out = z.table.take(zt.join(kt, names, join_type="left semi", use_threads=False)["__row"])
    if not nulls_equal:
        out = out.filter(pc.invert(any_null(out, cols)))
    return ArrowZSet(out)


def key_values(table: pa.Table, columns: Sequence[str]) -> set[tuple]:
    """The distinct tuples of ``columns`` in ``table`` holding no NULL, as Python values (what a
    keyed read is asked for: a NULL key matches no join key)."""
    t = distinct_keys(table, columns, nulls_equal=False)
    if t.num_rows == 0:
        return set()
    return set(zip(*(t[c].to_pylist() for c in columns), strict=True))


def rows_of_keys(z: ArrowZSet, columns: Sequence[str], keys: Iterable[tuple]) -> ArrowZSet:
    """The rows of ``z`` whose ``columns`` equal one of ``keys`` (Python tuples, as
    ``key_values`` gives them), weights kept; not consolidated. Join equality: a row with a
    NULL in ``columns`` matches nothing. ``restrict_to_keys`` for keys held as Python values."""
    cols, ks = list(columns), list(keys)
    # typed as z's own columns: restrict_to_keys takes keys of exactly the columns' types
    types = [z.table.schema.field(c).type for c in cols]
    table = pa.table([pa.array([k[i] for k in ks], t) for i, t in enumerate(types)], cols)
    return restrict_to_keys(z, cols, table, nulls_equal=False)


def net_change_by_key(z: ArrowZSet, columns: Sequence[str]) -> dict[tuple, int]:
    """Per distinct tuple of ``columns`` holding no NULL, the sum of the weights of ``z``'s rows
    carrying it, keyed by the tuple as Python values (the change a count state steps by,
    ``MatchCounts.step``). A key whose weights cancel stays, with 0; a NULL-keyed row is left
    out (it matches no join key). Keys are told apart as Arrow's group-by tells them, which is
    SQL's equality for the columnar key types (``arrow_expr.COLUMNAR_DTYPES``: no floats, whose
    0.0 and -0.0 Arrow would keep apart)."""
    cols = list(columns)
    keyed = z.table.filter(pc.invert(any_null(z.table, cols)))
    if keyed.num_rows == 0:
        return {}
    net = keyed.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    return dict(
        zip(
            zip(*[net[c].to_pylist() for c in cols], strict=True),
            net[f"{WEIGHT}_sum"].to_pylist(),
            strict=True,
        )
    )
