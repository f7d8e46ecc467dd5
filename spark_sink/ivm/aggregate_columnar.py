"""The columnar path of an aggregate's epoch (issue 26): the change folded, the stored group
states read and merged, and the output rows made over Arrow columns, one vectorized step for
all touched groups instead of Python per changed row and per group.

It serves the common shape, and ``columnar_reason`` says why an aggregate does not take it:

- grouped, or global with no MIN, MAX or DISTINCT (its one row, COUNT 0 included, is there
  while its state row is, as the row path keeps it);
- every grouping expression a plain column of BIGINT, INT, SMALLINT, TINYINT, STRING, BOOLEAN
  or DATE (no floating point keys: their NaN and -0.0 grouping is the row path's);
- every function COUNT(*) (Spark's COUNT(1)), COUNT(x, ...) of columns and literals, SUM(x) of
  an integral input into BIGINT, AVG(x) of an integral input into DOUBLE, SUM(x) and AVG(x) of
  a DECIMAL input (folded as its unscaled integers: ``unscaled``, ``scaled``), the input of a
  SUM or AVG a column or an expression ``ops.arrow_expr`` translates, or MIN(x), MAX(x) or
  COUNT(DISTINCT x) of a column of an integral type, DATE, TIMESTAMP, DECIMAL or STRING; no
  SUM/AVG(DISTINCT), no DOUBLE sums.

MIN, MAX and COUNT(DISTINCT x) keep their values (the values state table of each, key (group,
``o``), ``o`` the value's key bytes, complemented for MAX): the change's values are consolidated
per (group, value), their stored multiplicities read by key and joined, and the rows whose
multiplicity changes are written. COUNT(DISTINCT) adds, per group, the values that became
present less those that went. MIN/MAX keeps the better of the stored extreme and the best
value touched; where the stored extreme went, the group's first few stored values are read in
order (``read_first``, as the row path does) and the first that did not go competes.

Same state layout, same output and same errors as the row path (``AggregateState``): the group
state table (rows, per function its running sum as DECIMAL(38,0) and its non-NULL count) is read
by key and written with the same rows. A change the path cannot take exactly hands the epoch
back to the row path before anything is kept (``Fallback``): a NULL grouping key, a sum that
leaves BIGINT or an AVG whose sum leaves 2**53 (where Arrow's DECIMAL to DOUBLE cast may round
differently from Python's), a group whose row count would go negative (the row path raises
its error naming the group). Spark's differential tests are the judge
(``tests/spark/test_incremental.py``); ``tests/unit/test_aggregate_columnar.py`` holds the
path to the row path over seeded random changes and stored states.

The fold is ``spark_sink.ivm.ops.aggregate.fold_changes`` (exact: DECIMAL(38,0) where int64 could
wrap). Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvstore.mvcc.keys import escape_bytes
from kvstore.rowcodec import decimal128_bytes, fixed_key_bytes
from spark_sink.ivm.delta import COLUMNAR_ENV, columnar_switched_off
from spark_sink.ivm.expressions import (
    _INT_RANGE,
    agg_state_type,
    compile_expr,
    decimal_type,
    finalize,
    keeps_values,
)
from spark_sink.ivm.ops.aggregate import (
    COUNT,
    AggregateSpec,
    fold_changes,
    nonnull_column,
    sum_column,
)
from spark_sink.ivm.ops.arrow_expr import NotColumnar, arrow_expr, arrow_type, col_name
from spark_sink.ivm.ops.operator import NeedsBuild, ZSet
from spark_sink.ivm.ops.project import acero_project
from spark_sink.ivm.ops.zset import ArrowZSet, WeightOverflow, exact_group_sum
from spark_sink.ivm.plan import AggRef, Aggregate, Col, GroupRef, Lit
from spark_sink.ivm.read_pool import read_pool

_GROUP_DTYPES = {"bigint", "int", "smallint", "tinyint", "string", "boolean", "date"}
# The values a MIN, MAX or COUNT(DISTINCT) keeps on this path: one value per key bytes, so the
# change consolidates on the value itself (no DOUBLE: -0.0 and NaN are the row path's), and
# DECIMALs (one type: one unscaled integer per value).
_VALUE_DTYPES = {"bigint", "int", "smallint", "tinyint", "string", "date", "timestamp"}
COMPLEMENT = bytes(255 - i for i in range(256))  # bytes.translate table: a MAX's value order
_D256 = pa.decimal256(38, 0)
MAX_FIRST_VALUES = 8192  # the store's largest range_limit (kvstore.store.SCAN_CHUNK_ROWS)
_EXACT_DOUBLE = 2**53  # |x| below it: DECIMAL(38,0) -> DOUBLE is exact in any implementation


class Fallback(Exception):
    """This epoch's change is not taken by the columnar path; the row path takes it."""


def columnar_reason(agg: Aggregate) -> str | None:
    """None when ``agg``'s epochs take the columnar path, else why they do not (the switch
    ``SNAPVIEW_COLUMNAR=off`` among the reasons, as for the view's tree)."""
    if columnar_switched_off():
        return f"{COLUMNAR_ENV} is off"
    if not agg.groups and any(keeps_values(a) for a in agg.aggs):
        return "a global MIN, MAX or DISTINCT aggregate"
    for g, t in zip(agg.groups, agg.group_dtypes, strict=True):
        if not isinstance(g, Col):
            return "a computed grouping expression"
        if t not in _GROUP_DTYPES:
            return f"a grouping column of type {t}"
    for a in agg.aggs:
        if keeps_values(a):
            if a.distinct and a.kind != "count":
                return f"{a.kind.upper()}(DISTINCT ...)"
            if len(a.args) != 1 or not isinstance(a.args[0], Col):
                return f"{a.kind.upper()} of a computed expression"
            if a.input_dtype not in _VALUE_DTYPES and decimal_type(a.input_dtype) is None:
                return f"{a.kind.upper()} of {a.input_dtype}"
            continue
        if a.kind == "count" and all(isinstance(x, Col | Lit) for x in a.args):
            continue  # COUNT(*) is Spark's COUNT(1)
        if a.kind not in ("sum", "avg") or len(a.args) != 1:
            return f"{a.kind.upper()} of a computed expression"
        if not isinstance(a.args[0], Col):
            try:
                arrow_expr(a.args[0], {c.id: c for c in agg.child.columns()})
            except NotColumnar as e:
                return f"{a.kind.upper()} of {e}"
        d = decimal_type(a.input_dtype)
        if a.input_dtype in _INT_RANGE:
            if (a.kind, a.dtype) not in (("sum", "bigint"), ("avg", "double")):
                return f"{a.kind.upper()} into {a.dtype}"
        elif d is None:
            return f"{a.kind.upper()} of {a.input_dtype}"
        elif a.kind == "sum" and a.dtype != agg_state_type(a).lower():
            return f"SUM of {a.input_dtype} into {a.dtype}"
    return None


def unscaled(col: pa.ChunkedArray | pa.Array, dtype: str) -> pa.ChunkedArray:
    """The DECIMAL column ``col`` of plan type ``dtype`` as its unscaled integers (value times
    10**scale): int64 up to 18 digits, else DECIMAL(38,0). Exact: the 128-bit values are read
    again under scale 0, not divided."""
    p, s = decimal_type(dtype)  # type: ignore[misc]
    out = _read_as(pc.cast(col, pa.decimal128(p, s)), pa.decimal128(38, 0))
    return pc.cast(out, pa.int64()) if p <= 18 else out


def scaled(ints: pa.ChunkedArray | pa.Array, scale: int) -> pa.ChunkedArray:
    """Unscaled integers (int64 or DECIMAL(38,0)) as DECIMAL(38, ``scale``) values, exactly:
    ``unscaled``'s inverse."""
    return _read_as(pc.cast(ints, pa.decimal128(38, 0)), pa.decimal128(38, scale))


def _read_as(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray:
    """The DECIMAL128 column ``col``'s 128-bit values read again as type ``t`` (another
    DECIMAL128 precision and scale): the same buffers, no arithmetic."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    return pa.chunked_array(
        [pa.Array.from_buffers(t, len(c), c.buffers(), c.null_count, c.offset) for c in chunks], t
    )


@dataclass
class ColumnarResult:
    """One epoch's aggregate change, as the row path leaves it: the output rows and weights,
    the state rows to upsert and delete, and each touched group's new state values (for
    lookups at the new barrier)."""

    rows: list[tuple]
    weights: list[int]
    upserts: list[list]
    deletes: list[list]
    news: dict[tuple, list]
    groups_read: int
    # per values-keeping function: its values table's rows to upsert and to delete
    values: dict[int, tuple[list[list], list[list]]] = field(default_factory=dict)
    values_read: int = 0


@dataclass
class StateReads:
    """How the path reads the aggregate's state at the old barrier: ``groups`` the group state
    rows of group keys; ``values`` function j's values table rows of (group..., o) keys; and
    ``first`` the first ``width`` (o, v) of each group in function j's values table."""

    groups: Callable[[list[tuple]], pa.Table]
    values: Callable[[int, list[tuple]], pa.Table] = lambda j, keys: _no_values(j)
    first: Callable[[int, list[tuple], int], dict[tuple, list[tuple[bytes, Any]]]] = (
        lambda j, prefixes, width: _no_values(j)
    )


def _no_values(j: int) -> Any:
    raise AssertionError(f"function {j} keeps no values")


def first_values_width(gone: int, kind: str) -> int:
    """How many of a group's first stored values to read again when its MIN/MAX (``kind``) went
    and ``gone`` of its values went this barrier: one more than went is enough; more than the
    store's largest range_limit makes the epoch a build (NeedsBuild)."""
    if gone + 1 > MAX_FIRST_VALUES:
        raise NeedsBuild(f"{gone} values of one group's {kind.upper()} went in one barrier")
    return gone + 1


def value_orders(values: pa.Array, kind: str, descending: bool) -> pa.Array:
    """The ``o`` key column of a values state table for each of ``values`` (non-NULL, of the
    table's ``v`` column ``kind``): KeyCodec's bytes of the value, complemented for MAX (the
    bytes ``aggregate.ValueOrder`` makes one value at a time), as one binary array."""
    n = len(values)
    if kind == "STRING":
        esc = [escape_bytes(v.encode()) for v in values.to_pylist()]
        if descending:
            esc = [b.translate(COMPLEMENT) for b in esc]
        return pa.array(esc, pa.binary())
    if kind == "DECIMAL":  # the 16 little-endian bytes of each unscaled value, as stored
        w = 16
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        data = fixed_key_bytes(decimal128_bytes(arr), kind)
    else:
        w = 8 if kind in ("BIGINT", "TIMESTAMP") else 4  # INT, DATE
        ints = pc.cast(values, pa.int64() if w == 8 else pa.int32()).to_numpy(zero_copy_only=False)
        data = fixed_key_bytes(ints.astype(f"<i{w}").view(np.uint8).reshape(n, w), kind)
    if descending:
        data = 255 - data
    offsets = np.arange(0, (n + 1) * w, w, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())]
    )


class ColumnarAggregate:
    """The columnar path for one Aggregate node whose ``columnar_reason`` is None."""

    def __init__(
        self,
        agg: Aggregate,
        child_ids: tuple[int, ...],
        state_schema: pa.Schema,
        out_fns: list[Callable[[tuple], Any]],
        value_columns: dict[int, tuple[str, pa.DataType]] | None = None,
    ) -> None:
        """``value_columns``: per values-keeping function j, its values table's ``v`` column
        (its store kind and Arrow type)."""
        self.agg = agg
        self.values = value_columns or {}
        pos = {c: i for i, c in enumerate(child_ids)}
        self.ng = len(agg.groups)
        # A global aggregate folds under one constant group g0 = 0, the key of its one state
        # row (as the row path keys it); its output row is there while its state row is, even
        # with COUNT 0, and its groups are () in outputs and new states.
        self.global_agg = not agg.groups
        self.gnames = [f"g{i}" for i in range(max(self.ng, 1))]
        self.gtypes = [state_schema.field(n).type for n in self.gnames]
        self.gpos = [pos[g.id] for g in agg.groups]  # type: ignore[union-attr]
        # Per function, the input column its fold reads: SUM/AVG their argument (summed and
        # counted), COUNT(x, ...) an indicator, 0 where every argument is non-NULL and NULL
        # elsewhere (counted), COUNT(*) none (it is __count).
        self.inputs: list[tuple[str, list[int]] | None] = []
        self.child_ids = child_ids
        # A SUM/AVG of a computed expression: Spark's evaluator for a change given as rows,
        # and its Arrow translation for one given as Arrow (columnar_reason checked it).
        child_attrs = {c.id: c for c in agg.child.columns()}
        self.computed: dict[int, tuple[Callable[[tuple], Any], pc.Expression]] = {
            j: (compile_expr(a.args[0], pos), arrow_expr(a.args[0], child_attrs))
            for j, a in enumerate(agg.aggs)
            if a.kind in ("sum", "avg") and not isinstance(a.args[0], Col)
        }
        # A DECIMAL SUM/AVG folds its input's unscaled integers; its state keeps the sum.
        self.decimals = {
            j: a.input_dtype
            for j, a in enumerate(agg.aggs)
            if a.kind in ("sum", "avg") and decimal_type(a.input_dtype) is not None
        }
        for j, a in enumerate(agg.aggs):
            cols = [pos[x.id] for x in a.args if isinstance(x, Col)]
            if any(isinstance(x, Lit) and x.value is None for x in a.args):
                cols = [-1]  # COUNT(NULL, ...) counts nothing: position -1 reads None below
            if a.kind == "count" and not cols:
                self.inputs.append(None)  # COUNT(*), COUNT(1): every row
            else:
                self.inputs.append((f"x{j}", cols))
        # (a values-keeping function's input is its value, folded by _values, not summed)
        self.spec = AggregateSpec(
            tuple(self.gnames),
            tuple(inp[0] for j, inp in enumerate(self.inputs) if inp and j not in self.values),
        )
        self.out_fns = out_fns
        # Output expressions that are plain references are picked, not evaluated per row.
        refs = []
        for _, e in agg.outputs:
            if isinstance(e, GroupRef):
                refs.append(e.index)
            elif isinstance(e, AggRef):
                refs.append(self.ng + e.index)
            else:
                refs = []
                break
        self.picks = refs if len(refs) == len(agg.outputs) else None

    # ------------------------------------------------------------------ the epoch

    def run(self, child: ZSet, reads: StateReads) -> ColumnarResult:
        """The aggregate's change from its child's change ``child``, the stored states read by
        ``reads`` (at the old barrier). ``Fallback`` when the row path must take it; nothing
        is kept before it returns."""
        try:
            cols = self._columns_of_rows(child.rows)
            return self._run(cols, pa.array(child.weights, pa.int64()), reads)
        except (WeightOverflow, pa.ArrowInvalid) as e:
            raise Fallback(str(e)) from None

    def run_arrow(
        self,
        change: pa.Table,
        weights: pa.Array,
        names: list[str],
        reads: StateReads,
    ) -> ColumnarResult:
        """``run`` over a child's change given as Arrow: ``change``'s rows with ``weights``,
        the child's column at position i (of ``child_ids``) being ``change[names[i]]`` (a
        source's change scan, decoded in bulk, with no tuple per row)."""
        try:
            return self._run(self._columns_of_arrow(change, names), weights, reads)
        except (WeightOverflow, pa.ArrowInvalid) as e:
            raise Fallback(str(e)) from None

    def _run(self, cols: dict[str, Any], weights: pa.Array, reads: StateReads) -> ColumnarResult:
        z = ArrowZSet.from_table(pa.table(cols), weights)
        delta = fold_changes(self.spec, z)
        changes = {j: self._value_change(z, j) for j in self.values}
        if changes:  # a group whose values alone changed (an update of x) is touched too
            delta = self._with_value_groups(delta, changes)
        keys = list(zip(*[delta[n].to_pylist() for n in self.gnames], strict=True))
        keyed = {j: self._with_orders(change, j) for j, change in changes.items()}
        if keyed:
            # The group states and every values table's touched rows are read at once: their
            # keys follow from the change alone, and the requests overlap on the server.
            pool = read_pool()
            kept = {j: pool.submit(reads.values, j, k) for j, (_, k) in keyed.items()}
            try:
                old = reads.groups(keys)  # in this thread, beside the values reads
            finally:
                stored = {j: f.result() for j, f in kept.items()}
        else:
            old = reads.groups(keys)
        both = delta.join(old, keys=self.gnames, join_type="left outer", use_threads=False)
        values: dict[int, tuple[list[list], list[list]]] = {}
        gone: dict[int, pa.Table] = {}
        values_read = 0
        for j, (change, _) in keyed.items():
            both, values[j], gone[j] = self._values(both, change, stored[j], j)
            values_read += change.num_rows
        had = pc.is_valid(both["nrows"])
        old_rows = pc.fill_null(both["nrows"], 0)
        new_rows = pc.add_checked(old_rows, both[COUNT])
        if pc.any(pc.less(new_rows, 0)).as_py():
            raise Fallback("a group's row count would go negative")
        if self.global_agg:  # the one row is there while its state row is
            old_present = had
            new_present = pc.is_valid(new_rows)
        else:
            old_present = pc.greater(old_rows, 0)
            new_present = pc.greater(new_rows, 0)
        olds, news = [], []  # per function: (running sum, non-NULL count), old and new
        for j, a in enumerate(self.agg.aggs):
            s_type = both.schema.field(f"s{j}").type
            n_old = pc.fill_null(both[f"n{j}"], 0)
            if j in self.values:
                s_old = both[f"s{j}"]
                if a.distinct:  # COUNT(DISTINCT x): the values that came less those that went
                    s_old = pc.fill_null(s_old, pa.scalar(0, s_type))
                    s_new, n_new = s_old, pc.add_checked(n_old, both[f"__vd{j}"])
                else:
                    n_new = pc.add_checked(n_old, both[f"__vc{j}"])
                    s_new, extra = self._extreme(both, j, n_new, gone[j], reads)
                    values_read += extra
                olds.append((s_old, n_old))
                news.append((s_new, n_new))
                continue
            zero = pa.scalar(Decimal(0) if pa.types.is_decimal(s_type) else 0, s_type)
            s_old = pc.fill_null(both[f"s{j}"], zero)
            inp = self.inputs[j]
            if inp is None:
                n_delta = both[COUNT]
            else:
                n_delta = both[nonnull_column(inp[0])]
            n_new = pc.add_checked(n_old, n_delta)
            if a.kind == "count":
                s_new = s_old  # a COUNT keeps no running sum (0, as the row path's)
            elif j in self.decimals:
                assert inp is not None
                # the unscaled delta read at the sum's scale, added in 256 bits and cast back to
                # the state's DECIMAL(p+10, s), which raises where Spark's sum overflows
                scale = s_type.scale
                wide = pa.decimal256(38, scale)
                d = pc.cast(scaled(both[sum_column(inp[0])], scale), wide)
                s_new = pc.cast(pc.add_checked(pc.cast(s_old, wide), d), s_type)
            else:
                assert inp is not None
                # (DECIMAL(38,0) + DECIMAL(38,0) is typed DECIMAL(39,0): added in 256 bits, then
                # cast back, which raises where the sum leaves 38 digits)
                d = pc.cast(both[sum_column(inp[0])], _D256)
                s_new = pc.cast(pc.add_checked(pc.cast(s_old, _D256), d), s_type)
            olds.append((s_old, n_old))
            news.append((s_new, n_new))
        got = self._emit(both, had, new_rows, old_present, new_present, olds, news)
        got.values = values
        got.values_read = values_read
        return got

    # ------------------------------------------------------------------ kept values

    def _value_change(self, z: ArrowZSet, j: int) -> pa.Table:
        """Function j's change of values per (group, value): its non-NULL input values with
        their weights summed (``__w``), rows that cancel dropped."""
        t = pa.table(
            {**{g: z.table[g] for g in self.gnames}, "v": z.table[f"x{j}"], "__w": z.weights}
        )
        t = t.filter(pc.is_valid(t["v"]))
        out = exact_group_sum(t, [*self.gnames, "v"], ["__w"])
        return out.filter(pc.not_equal(out["__w"], 0))

    def _with_value_groups(self, delta: pa.Table, changes: dict[int, pa.Table]) -> pa.Table:
        """The fold's groups and every group whose values changed, the fold's columns 0 where
        it had no row (its plain deltas summed to nothing)."""
        groups = pa.table(
            {
                g: pa.chunked_array(
                    [*delta[g].chunks, *(k for c in changes.values() for k in c[g].chunks)],
                    delta[g].type,
                )
                for g in self.gnames
            }
        )
        groups = groups.group_by(self.gnames, use_threads=False).aggregate([])
        out = groups.join(delta, keys=self.gnames, join_type="left outer", use_threads=False)
        for name in self.spec.delta_columns():
            i = out.schema.get_field_index(name)
            out = out.set_column(i, name, pc.fill_null(out[name], 0))
        return out

    def _with_orders(self, change: pa.Table, j: int) -> tuple[pa.Table, list[tuple]]:
        """Function j's value change with each value's ``o`` appended, and the values table
        keys (group..., o) to read."""
        o = value_orders(change["v"], self.values[j][0], self.agg.aggs[j].kind == "max")
        change = change.append_column("o", o)
        keys = list(zip(*[change[g].to_pylist() for g in self.gnames], o.to_pylist(), strict=True))
        return change, keys

    def _values(
        self, both: pa.Table, change: pa.Table, stored: pa.Table, j: int
    ) -> tuple[pa.Table, tuple[list[list], list[list]], pa.Table]:
        """Function j's values change (``_with_orders``) applied: its rows' stored
        multiplicities (``stored``, the values table's rows of its keys) joined, the values
        table's upserts and deletes, and per group (joined into ``both``) the non-NULL count's
        change ``__vc{j}``, the best value present among those touched ``__vb{j}`` (MIN/MAX) or
        the distinct count's change ``__vd{j}`` (DISTINCT). Also the (group, value, o) rows
        whose multiplicity fell to 0."""
        a = self.agg.aggs[j]
        stored = stored.select([*self.gnames, "v", "n"])
        m = change.join(stored, keys=[*self.gnames, "v"], join_type="left outer", use_threads=False)
        n_old = pc.fill_null(m["n"], 0)
        n_new = pc.add_checked(n_old, m["__w"])
        if pc.any(pc.less(n_new, 0)).as_py():
            raise Fallback(f"a value of function {j} would occur a negative number of times")
        now = pc.greater(n_new, 0)
        went = pc.and_(pc.greater(n_old, 0), pc.equal(n_new, 0))
        cols = [*self.gnames, "o", "v"]
        kept = m.filter(now)
        upserts = _rows(kept.select(cols), kept_n=pc.filter(n_new, now))
        gone = m.filter(went).select(cols)
        deletes = _rows(gone, kept_n=pa.array([0] * gone.num_rows, pa.int64()))
        per_group: list[tuple[str, str, pa.Table]] = []
        if a.distinct:
            d = distinct_change(n_old, n_new)
            t = pa.table({**{g: m[g] for g in self.gnames}, f"__vd{j}": d})
            per_group.append((f"__vd{j}", "sum", t))
        else:
            t = m.select([*self.gnames, "__w"]).rename_columns([*self.gnames, f"__vc{j}"])
            per_group.append((f"__vc{j}", "sum", t))
            best = (
                m.filter(now).select([*self.gnames, "v"]).rename_columns([*self.gnames, f"__vb{j}"])
            )
            per_group.append((f"__vb{j}", a.kind, best))
        for name, fn, t in per_group:
            g = t.group_by(self.gnames, use_threads=False).aggregate([(name, fn)])
            g = g.rename_columns([*self.gnames, name])
            both = both.join(g, keys=self.gnames, join_type="left outer", use_threads=False)
            if fn == "sum":
                i = both.schema.get_field_index(name)
                both = both.set_column(i, name, pc.fill_null(both[name], 0))
        return both, (upserts, deletes), gone

    def _extreme(
        self, both: pa.Table, j: int, n_new: pa.ChunkedArray, gone: pa.Table, reads: StateReads
    ) -> tuple[pa.ChunkedArray, int]:
        """MIN/MAX function j's new value per group of ``both``: NULL where no non-NULL value
        remains, else the better of the stored extreme and the best value touched; where the
        stored extreme went, the group's first stored values that did not go compete instead
        of it (``reads.first``). Also how many groups were read so."""
        kind = self.agg.aggs[j].kind
        s_old, best = both[f"s{j}"], both[f"__vb{j}"]
        s_new = _better(kind, s_old, best)
        # the groups whose stored extreme went: its (group, value) among the gone rows
        olds = pa.table({**{g: both[g] for g in self.gnames}, "v": s_old}).filter(
            pc.is_valid(s_old)
        )
        went = gone.join(olds, keys=[*self.gnames, "v"], join_type="inner", use_threads=False)
        if went.num_rows:
            s_new = self._reread(both, j, s_new, went, gone, reads)
        s_new = pc.if_else(pc.greater(n_new, 0), s_new, pa.scalar(None, s_old.type))
        return s_new, went.num_rows

    def _reread(
        self,
        both: pa.Table,
        j: int,
        s_new: pa.ChunkedArray,
        went: pa.Table,
        gone: pa.Table,
        reads: StateReads,
    ) -> pa.ChunkedArray:
        """``s_new`` with each group of ``went`` (whose stored extreme went) given the better of
        its best touched value and its first stored value that did not go."""
        kind = self.values[j][0]
        descending = self.agg.aggs[j].kind == "max"
        gone_o: dict[tuple, set[bytes]] = {}
        gcols = [gone[g].to_pylist() for g in self.gnames]
        for *key, o in zip(*gcols, gone["o"].to_pylist(), strict=True):
            gone_o.setdefault(tuple(key), set()).add(o)
        groups = list(zip(*[went[g].to_pylist() for g in self.gnames], strict=True))
        width = first_values_width(max(len(gone_o[g]) for g in groups), self.agg.aggs[j].kind)
        first = reads.first(j, groups, width)
        cols = [both[g].to_pylist() for g in self.gnames]
        at = {g: i for i, g in enumerate(zip(*cols, strict=True))}
        best = both[f"__vb{j}"].to_pylist()
        out = s_new.to_pylist()
        for g in groups:
            i = at[g]
            cand = [v for o, v in first.get(g, []) if o not in gone_o[g]][:1]
            if best[i] is not None:
                cand.append(best[i])
            if not cand:
                out[i] = None
                continue
            orders = value_orders(pa.array(cand, s_new.type), kind, descending).to_pylist()
            out[i] = cand[orders.index(min(orders))]
        return pa.chunked_array([pa.array(out, s_new.type)])

    def _columns_of_rows(self, rows: list[tuple]) -> dict[str, Any]:
        """The fold's input columns (groups, then each function's input) from tuples."""
        cols: dict[str, pa.Array] = {}
        if self.global_agg:
            cols["g0"] = pa.array(np.zeros(len(rows), np.int32), self.gtypes[0])
        for name, t, p in zip(
            self.gnames[: self.ng], self.gtypes[: self.ng], self.gpos, strict=True
        ):
            arr = pa.array([r[p] for r in rows], type=t)
            if arr.null_count:
                raise Fallback("a NULL grouping key")
            cols[name] = arr
        for inp in filter(None, self.inputs):
            name, ps = inp
            j = int(name[1:])
            vals: list[Any]
            if j in self.values:
                cols[name] = pa.array([r[ps[0]] for r in rows], type=self.values[j][1])
                continue
            if self.agg.aggs[j].kind == "count":
                if ps == [-1]:
                    vals = [None] * len(rows)
                else:
                    vals = [0 if all(r[p] is not None for p in ps) else None for r in rows]
            elif j in self.computed:
                fn = self.computed[j][0]
                vals = [fn(r) for r in rows]
            else:
                p = ps[0]
                vals = [r[p] for r in rows]
            if j in self.decimals:
                cols[name] = unscaled(
                    pa.array(vals, arrow_type(self.decimals[j])), self.decimals[j]
                )
            else:
                cols[name] = pa.array(vals, type=pa.int64())
        return cols

    def _columns_of_arrow(self, change: pa.Table, names: list[str]) -> dict[str, Any]:
        """The fold's input columns, as ``_columns_of_rows`` makes them, from Arrow columns."""
        cols: dict[str, Any] = {}
        if self.global_agg:
            cols["g0"] = pa.array(np.zeros(change.num_rows, np.int32), self.gtypes[0])
        for name, t, p in zip(
            self.gnames[: self.ng], self.gtypes[: self.ng], self.gpos, strict=True
        ):
            arr = pc.cast(change[names[p]], t)
            if arr.null_count:
                raise Fallback("a NULL grouping key")
            cols[name] = arr
        n = change.num_rows
        computed = self._computed_arrow(change, names)
        for inp in filter(None, self.inputs):
            name, ps = inp
            j = int(name[1:])
            if j in self.values:
                cols[name] = pc.cast(change[names[ps[0]]], self.values[j][1])
            elif self.agg.aggs[j].kind != "count":
                x = computed[j] if j in computed else change[names[ps[0]]]
                if j in self.decimals:
                    cols[name] = unscaled(x, self.decimals[j])
                else:
                    cols[name] = pc.cast(x, pa.int64())
            elif ps == [-1]:
                cols[name] = pa.nulls(n, pa.int64())
            else:
                valid = pc.is_valid(change[names[ps[0]]])
                for p in ps[1:]:
                    valid = pc.and_(valid, pc.is_valid(change[names[p]]))
                cols[name] = pc.if_else(
                    valid, pa.scalar(0, pa.int64()), pa.scalar(None, pa.int64())
                )
        return cols

    def _computed_arrow(self, change: pa.Table, names: list[str]) -> dict[int, Any]:
        """Each computed SUM/AVG input over ``change``, in one Acero project (the change's
        columns named as the translation names them)."""
        if not self.computed:
            return {}
        named = pa.Table.from_arrays(
            [change[names[i]] for i in range(len(self.child_ids))],
            names=[col_name(c) for c in self.child_ids],
        )
        js = list(self.computed)
        out = acero_project(named, [self.computed[j][1] for j in js], [f"x{j}" for j in js])
        return {j: out[f"x{j}"] for j in js}

    def _finals(self, s: pa.ChunkedArray, n: pa.ChunkedArray, j: int) -> list:
        """Function ``j``'s output values (Spark's: COUNT the count, SUM NULL over no values,
        AVG the sum over the count) from running sums and counts."""
        a = self.agg.aggs[j]
        if a.kind == "count":
            return n.to_pylist()
        if a.kind in ("min", "max"):
            return s.to_pylist()  # NULL where no non-NULL value is kept
        empty = pc.equal(n, 0)
        if j in self.decimals:
            if a.kind == "sum":  # the kept sum, of Spark's result type (the state's)
                total = pc.cast(s, arrow_type(a.dtype))
                return pc.if_else(empty, pa.scalar(None, total.type), total).to_pylist()
            # AVG: Spark's two roundings, per touched group (few), by the row path's finalize
            return [finalize(a, t, c) for t, c in zip(s.to_pylist(), n.to_pylist(), strict=True)]
        if a.kind == "sum":
            total = pc.cast(s, pa.int64())  # ArrowInvalid (-> Fallback) where BIGINT overflows
            return pc.if_else(empty, pa.scalar(None, pa.int64()), total).to_pylist()
        lo, hi = pc.min_max(s).values()
        if max(abs(int(lo.as_py() or 0)), abs(int(hi.as_py() or 0))) >= _EXACT_DOUBLE:
            raise Fallback("an AVG over a sum beyond 2**53")
        avg = pc.divide(pc.cast(s, pa.float64()), pc.cast(n, pa.float64()))
        return pc.if_else(empty, pa.scalar(None, pa.float64()), avg).to_pylist()

    def _groups(self, t: pa.Table) -> list[tuple]:
        """The group of each row of ``t`` (its grouping columns); () for a global aggregate."""
        if self.global_agg:
            return [()] * t.num_rows
        return list(zip(*[t[n].to_pylist() for n in self.gnames], strict=True))

    def _out_rows(self, groups: list[tuple], finals: list[list]) -> list[tuple]:
        per_group = list(zip(*finals, strict=True)) if finals else [()] * len(groups)
        env = [(*g, *f) for g, f in zip(groups, per_group, strict=True)]
        if self.picks is not None:
            picks = self.picks
            return [tuple([r[i] for i in picks]) for r in env]
        fns = self.out_fns
        return [tuple([f(r) for f in fns]) for r in env]

    def _emit(
        self,
        both: pa.Table,
        had: pa.ChunkedArray,
        new_rows: pa.ChunkedArray,
        old_present: pa.ChunkedArray,
        new_present: pa.ChunkedArray,
        olds: list[tuple[pa.ChunkedArray, pa.ChunkedArray]],
        news: list[tuple[pa.ChunkedArray, pa.ChunkedArray]],
    ) -> ColumnarResult:
        """The output rows (old rows of the groups that had rows retracted, new rows of those
        that have rows emitted) and the state rows, as the row path makes them."""
        nf = len(self.agg.aggs)
        out_rows: list[tuple] = []
        weights: list[int] = []
        for mask, sums, sign in ((old_present, olds, -1), (new_present, news, 1)):
            part = both.filter(mask)
            if not part.num_rows:
                continue
            groups = self._groups(part)
            finals = [
                self._finals(sums[j][0].filter(mask), sums[j][1].filter(mask), j) for j in range(nf)
            ]
            out_rows += self._out_rows(groups, finals)
            weights += [sign] * part.num_rows
        # The new state of every touched group: upserted while it has rows, deleted once it
        # has none (if it was stored).
        groups = self._groups(both)
        state_cols = [new_rows.to_pylist()]
        for s, n in news:
            state_cols += [s.to_pylist(), n.to_pylist()]
        state_rows = list(zip(*state_cols, strict=True))
        present = new_present.to_pylist()
        stored = had.to_pylist()
        upserts, deletes = [], []
        new_states: dict[tuple, list] = {}
        for g, vals, p, h in zip(groups, state_rows, present, stored, strict=True):
            new_states[g] = list(vals)
            key = (0,) if self.global_agg else g
            if p:
                upserts.append([*key, *vals])
            elif h:
                deletes.append([*key, *vals])
        return ColumnarResult(out_rows, weights, upserts, deletes, new_states, len(groups))


def _better(kind: str, a: Any, b: Any) -> Any:
    """Per row, the smaller (MIN) or larger (MAX) of ``a`` and ``b``, NULL only where both are.
    A TIMESTAMP is compared as its microseconds (Arrow's element-wise kernels take no zoned
    timestamps)."""
    fn = pc.min_element_wise if kind == "min" else pc.max_element_wise
    if pa.types.is_timestamp(a.type):
        micros = fn(pc.cast(a, pa.int64()), pc.cast(b, pa.int64()), skip_nulls=True)
        return pc.cast(micros, a.type)
    return fn(a, b, skip_nulls=True)


def distinct_change(n_old: Any, n_new: Any) -> Any:
    """Per (group, value) row, how it changes the group's distinct count: +1 for a value that
    became present, -1 for one that went, else 0."""
    return pc.subtract(
        pc.cast(pc.greater(n_new, 0), pa.int64()), pc.cast(pc.greater(n_old, 0), pa.int64())
    )


def _rows(t: pa.Table, kept_n: pa.Array | pa.ChunkedArray) -> list[list]:
    """The values table rows [group..., o, v, n] of ``t`` (group..., o, v) with counts
    ``kept_n``, as the row path writes them."""
    cols = [t[c].to_pylist() for c in t.column_names]
    return [list(r) for r in zip(*cols, kept_n.to_pylist(), strict=True)]
