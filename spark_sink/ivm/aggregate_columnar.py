"""The columnar path of an aggregate's epoch (issue 26): the change folded, the stored group
states read and merged, and the output rows made over Arrow columns, one vectorized step for
all touched groups instead of Python per changed row and per group.

It serves the common shape, and ``columnar_reason`` says why an aggregate does not take it:

- grouped (a global aggregate keeps its one row with COUNT 0: the row path);
- every grouping expression a plain column of BIGINT, INT, SMALLINT, TINYINT, STRING, BOOLEAN
  or DATE (no floating point keys: their NaN and -0.0 grouping is the row path's);
- every function COUNT(*) (Spark's COUNT(1)), COUNT(x, ...) of columns and literals, SUM(x) of
  an integral column into BIGINT, or AVG(x) of an integral column into DOUBLE; none DISTINCT,
  MIN/MAX, DOUBLE or DECIMAL sums.

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
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_sink.ivm.expressions import _INT_RANGE
from spark_sink.ivm.ops.aggregate import (
    COUNT,
    AggregateSpec,
    fold_changes,
    nonnull_column,
    sum_column,
)
from spark_sink.ivm.ops.operator import ZSet
from spark_sink.ivm.ops.zset import ArrowZSet, WeightOverflow
from spark_sink.ivm.plan import AggRef, Aggregate, Col, GroupRef, Lit

_GROUP_DTYPES = {"bigint", "int", "smallint", "tinyint", "string", "boolean", "date"}
_D256 = pa.decimal256(38, 0)
_EXACT_DOUBLE = 2**53  # |x| below it: DECIMAL(38,0) -> DOUBLE is exact in any implementation


class Fallback(Exception):
    """This epoch's change is not taken by the columnar path; the row path takes it."""


def columnar_reason(agg: Aggregate) -> str | None:
    """None when ``agg``'s epochs take the columnar path, else why they do not."""
    if not agg.groups:
        return "a global aggregate"
    for g, t in zip(agg.groups, agg.group_dtypes, strict=True):
        if not isinstance(g, Col):
            return "a computed grouping expression"
        if t not in _GROUP_DTYPES:
            return f"a grouping column of type {t}"
    for a in agg.aggs:
        if a.distinct:
            return f"{a.kind.upper()}(DISTINCT ...)"
        if a.kind == "count" and all(isinstance(x, Col | Lit) for x in a.args):
            continue  # COUNT(*) is Spark's COUNT(1)
        if not all(isinstance(x, Col) for x in a.args):
            return f"{a.kind.upper()} of a computed expression"
        if a.kind not in ("sum", "avg") or len(a.args) != 1:
            return f"{a.kind.upper()}"
        if a.input_dtype not in _INT_RANGE:
            return f"{a.kind.upper()} of {a.input_dtype}"
        if (a.kind, a.dtype) not in (("sum", "bigint"), ("avg", "double")):
            return f"{a.kind.upper()} into {a.dtype}"
    return None


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


class ColumnarAggregate:
    """The columnar path for one Aggregate node whose ``columnar_reason`` is None."""

    def __init__(
        self,
        agg: Aggregate,
        child_ids: tuple[int, ...],
        state_schema: pa.Schema,
        out_fns: list[Callable[[tuple], Any]],
    ) -> None:
        self.agg = agg
        pos = {c: i for i, c in enumerate(child_ids)}
        self.ng = len(agg.groups)
        self.gnames = [f"g{i}" for i in range(self.ng)]
        self.gtypes = [state_schema.field(n).type for n in self.gnames]
        self.gpos = [pos[g.id] for g in agg.groups]  # type: ignore[union-attr]
        # Per function, the input column its fold reads: SUM/AVG their argument (summed and
        # counted), COUNT(x, ...) an indicator, 0 where every argument is non-NULL and NULL
        # elsewhere (counted), COUNT(*) none (it is __count).
        self.inputs: list[tuple[str, list[int]] | None] = []
        for j, a in enumerate(agg.aggs):
            cols = [pos[x.id] for x in a.args if isinstance(x, Col)]
            if any(isinstance(x, Lit) and x.value is None for x in a.args):
                cols = [-1]  # COUNT(NULL, ...) counts nothing: position -1 reads None below
            if a.kind == "count" and not cols:
                self.inputs.append(None)  # COUNT(*), COUNT(1): every row
            else:
                self.inputs.append((f"x{j}", cols))
        self.spec = AggregateSpec(
            tuple(self.gnames), tuple(name for name, _ in filter(None, self.inputs))
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

    def run(self, child: ZSet, read_state: Callable[[list[tuple]], pa.Table]) -> ColumnarResult:
        """The aggregate's change from its child's change ``child``, the stored states read by
        ``read_state`` (group keys -> state rows at the old barrier). ``Fallback`` when the
        row path must take it; nothing is kept before it returns."""
        try:
            cols = self._columns_of_rows(child.rows)
            return self._run(cols, pa.array(child.weights, pa.int64()), read_state)
        except (WeightOverflow, pa.ArrowInvalid) as e:
            raise Fallback(str(e)) from None

    def run_arrow(
        self,
        change: pa.Table,
        weights: pa.Array,
        names: list[str],
        read_state: Callable[[list[tuple]], pa.Table],
    ) -> ColumnarResult:
        """``run`` over a child's change given as Arrow: ``change``'s rows with ``weights``,
        the child's column at position i (of ``child_ids``) being ``change[names[i]]`` (a
        source's change scan, decoded in bulk, with no tuple per row)."""
        try:
            return self._run(self._columns_of_arrow(change, names), weights, read_state)
        except (WeightOverflow, pa.ArrowInvalid) as e:
            raise Fallback(str(e)) from None

    def _run(
        self, cols: dict[str, Any], weights: pa.Array, read_state: Callable[[list[tuple]], pa.Table]
    ) -> ColumnarResult:
        z = ArrowZSet.from_table(pa.table(cols), weights)
        delta = fold_changes(self.spec, z)
        keys = list(zip(*[delta[n].to_pylist() for n in self.gnames], strict=True))
        old = read_state(keys)
        both = delta.join(old, keys=self.gnames, join_type="left outer")
        had = pc.is_valid(both["nrows"])
        old_rows = pc.fill_null(both["nrows"], 0)
        new_rows = pc.add_checked(old_rows, both[COUNT])
        if pc.any(pc.less(new_rows, 0)).as_py():
            raise Fallback("a group's row count would go negative")
        old_present = pc.greater(old_rows, 0)
        new_present = pc.greater(new_rows, 0)
        olds, news = [], []  # per function: (running sum, non-NULL count), old and new
        for j, a in enumerate(self.agg.aggs):
            s_type = both.schema.field(f"s{j}").type
            s_old = pc.fill_null(both[f"s{j}"], pa.scalar(0, pa.int64()).cast(s_type))
            n_old = pc.fill_null(both[f"n{j}"], 0)
            inp = self.inputs[j]
            if inp is None:
                n_delta = both[COUNT]
            else:
                n_delta = both[nonnull_column(inp[0])]
            n_new = pc.add_checked(n_old, n_delta)
            if a.kind == "count":
                s_new = s_old  # a COUNT keeps no running sum (0, as the row path's)
            else:
                assert inp is not None
                # (DECIMAL(38,0) + DECIMAL(38,0) is typed DECIMAL(39,0): added in 256 bits, then
                # cast back, which raises where the sum leaves 38 digits)
                d = pc.cast(both[sum_column(inp[0])], _D256)
                s_new = pc.cast(pc.add_checked(pc.cast(s_old, _D256), d), s_type)
            olds.append((s_old, n_old))
            news.append((s_new, n_new))
        return self._emit(both, had, new_rows, old_present, new_present, olds, news)

    def _columns_of_rows(self, rows: list[tuple]) -> dict[str, Any]:
        """The fold's input columns (groups, then each function's input) from tuples."""
        cols: dict[str, pa.Array] = {}
        for name, t, p in zip(self.gnames, self.gtypes, self.gpos, strict=True):
            arr = pa.array([r[p] for r in rows], type=t)
            if arr.null_count:
                raise Fallback("a NULL grouping key")
            cols[name] = arr
        for inp in filter(None, self.inputs):
            name, ps = inp
            j = int(name[1:])
            vals: list[Any]
            if self.agg.aggs[j].kind == "count":
                if ps == [-1]:
                    vals = [None] * len(rows)
                else:
                    vals = [0 if all(r[p] is not None for p in ps) else None for r in rows]
            else:
                p = ps[0]
                vals = [r[p] for r in rows]
            cols[name] = pa.array(vals, type=pa.int64())
        return cols

    def _columns_of_arrow(self, change: pa.Table, names: list[str]) -> dict[str, Any]:
        """The fold's input columns, as ``_columns_of_rows`` makes them, from Arrow columns."""
        cols: dict[str, Any] = {}
        for name, t, p in zip(self.gnames, self.gtypes, self.gpos, strict=True):
            arr = pc.cast(change[names[p]], t)
            if arr.null_count:
                raise Fallback("a NULL grouping key")
            cols[name] = arr
        n = change.num_rows
        for inp in filter(None, self.inputs):
            name, ps = inp
            j = int(name[1:])
            if self.agg.aggs[j].kind != "count":
                cols[name] = pc.cast(change[names[ps[0]]], pa.int64())
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

    def _finals(self, s: pa.ChunkedArray, n: pa.ChunkedArray, j: int) -> list:
        """Function ``j``'s output values (Spark's: COUNT the count, SUM NULL over no values,
        AVG the sum over the count) from running sums and counts."""
        a = self.agg.aggs[j]
        if a.kind == "count":
            return n.to_pylist()
        empty = pc.equal(n, 0)
        if a.kind == "sum":
            total = pc.cast(s, pa.int64())  # ArrowInvalid (-> Fallback) where BIGINT overflows
            return pc.if_else(empty, pa.scalar(None, pa.int64()), total).to_pylist()
        lo, hi = pc.min_max(s).values()
        if max(abs(int(lo.as_py() or 0)), abs(int(hi.as_py() or 0))) >= _EXACT_DOUBLE:
            raise Fallback("an AVG over a sum beyond 2**53")
        avg = pc.divide(pc.cast(s, pa.float64()), pc.cast(n, pa.float64()))
        return pc.if_else(empty, pa.scalar(None, pa.float64()), avg).to_pylist()

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
            groups = list(zip(*[part[n].to_pylist() for n in self.gnames], strict=True))
            finals = [
                self._finals(sums[j][0].filter(mask), sums[j][1].filter(mask), j) for j in range(nf)
            ]
            out_rows += self._out_rows(groups, finals)
            weights += [sign] * part.num_rows
        # The new state of every touched group: upserted while it has rows, deleted once it
        # has none (if it was stored).
        groups = list(zip(*[both[n].to_pylist() for n in self.gnames], strict=True))
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
            if p:
                upserts.append([*g, *vals])
            elif h:
                deletes.append([*g, *vals])
        return ColumnarResult(out_rows, weights, upserts, deletes, new_states, len(groups))
